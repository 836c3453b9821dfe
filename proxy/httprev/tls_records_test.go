// Records a client gets through TLS termination: a small response in one record, as HAProxy and nginx send it.

package httprev_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

// recordCounter is a client's socket that counts the TLS records of
// application data (type 23) it reads, whatever the reads' sizes.
type recordCounter struct {
	net.Conn
	hdr     []byte // the next record's header, while it is cut short
	left    int    // bytes of the current record's body still to come
	appData int
}

func (r *recordCounter) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	for p := b[:n]; len(p) > 0; {
		if r.left > 0 {
			k := min(r.left, len(p))
			r.left, p = r.left-k, p[k:]
			continue
		}
		k := min(5-len(r.hdr), len(p))
		r.hdr, p = append(r.hdr, p[:k]...), p[k:]
		if len(r.hdr) == 5 {
			if r.hdr[0] == 23 {
				r.appData++
			}
			r.left, r.hdr = int(r.hdr[3])<<8|int(r.hdr[4]), r.hdr[:0]
		}
	}
	return n, err
}

// TestTLSSmallResponseOneRecord: a response of 1 or 8 KiB, head and
// body, comes to the client in one TLS record (one seal, one send), on
// the first request of a connection as on the next: the head is not
// sealed apart from its body, and records are not cut to a segment's
// size while the connection is young (crypto/tls's dynamic record
// sizing), as HAProxy and nginx do not cut them.
func TestTLSSmallResponseOneRecord(t *testing.T) {
	dir := t.TempDir()
	cert := config.Certificate{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	writeCertificate(t, cert, "shop.test")
	for _, size := range []int{1 << 10, 8 << 10} {
		t.Run(fmt.Sprintf("%dKiB", size>>10), func(t *testing.T) {
			body := strings.Repeat("x", size)
			resp := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/octet-stream\r\n\r\n%s", size, body))
			up := fwdtest.RawBackend(t, func(c net.Conn) { fwdtest.AnswerEveryHead(c, resp) })
			f := fwdtest.ReverseProxy(t, "copy", fmt.Sprintf(", tls: {certificates: [{cert_file: %q, key_file: %q}]}", cert.CertFile, cert.KeyFile), up)
			raw := &recordCounter{Conn: fwdtest.DialFor(t, f.Addr("rev").String(), 10*time.Second)}
			// TLS 1.2: its session ticket comes within the handshake, so
			// every record of application data after it is the response's.
			c := tls.Client(raw, &tls.Config{ServerName: "shop.test", InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
			if err := c.Handshake(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16<<10)
			for i := range 3 {
				before := raw.appData
				if _, err := c.Write([]byte("GET /obj HTTP/1.1\r\nHost: shop.test\r\n\r\n")); err != nil {
					t.Fatal(err)
				}
				if err := readResponse(c, buf, size); err != nil {
					t.Fatal(err)
				}
				if got := raw.appData - before; got != 1 {
					t.Errorf("request %d: the response came in %d records, want 1", i+1, got)
				}
			}
		})
	}
}

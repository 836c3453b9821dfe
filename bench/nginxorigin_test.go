// Tests of the nginx origin: the built-in origin's bytes, from files where it has them, in the clear and over TLS.

package bench

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"github.com/splicer/splicer/origin"
)

// TestNginxOriginServesTheBuiltinsBytes checks that nginx serves the
// objects ServeObjects wrote as files (nginx's ETag says so) and passes
// the other sizes to the built-in origin, with the same bytes either way.
func TestNginxOriginServesTheBuiltinsBytes(t *testing.T) {
	if why := missing("nginx"); why != "" {
		t.Skip(why)
	}
	e := newOriginOnlyEnv(t)
	a := addressing{server: "127.0.0.3"} // a loopback address no other test listens on
	if err := e.startOrigin(local{}, a); err != nil {
		t.Fatal(err)
	}
	addr, note := e.startNginxOrigin(context.Background(), a)
	if e.objectDir == "" {
		t.Fatalf("nginx origin not started: %s", note)
	}
	const fromFile, fromFile2, builtin = 1024, 3 << 20, 5000
	if err := e.ServeObjects([]int64{fromFile, fromFile2}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fromFile, fromFile2, builtin} {
		resp, err := http.Get("http://" + addr + origin.ObjectPath(size))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != size {
			t.Fatalf("GET %d bytes: status %d, %d bytes, %v", size, resp.StatusCode, n, err)
		}
		if [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
			t.Errorf("GET %d bytes: not the built-in origin's object", size)
		}
		if file := resp.Header.Get("Etag") != ""; file != (size != builtin) {
			t.Errorf("GET %d bytes: served from a file = %v, want %v", size, file, size != builtin)
		}
	}
}

// TestNginxOriginServesTLS checks that the nginx origin serves the
// objects over TLS with a certificate for tlsServerName, the same bytes
// as the built-in origin's.
func TestNginxOriginServesTLS(t *testing.T) {
	if why := missing("nginx"); why != "" {
		t.Skip(why)
	}
	e := newOriginOnlyEnv(t)
	a := addressing{server: "127.0.0.4"} // a loopback address no other test listens on
	if err := e.startOrigin(local{}, a); err != nil {
		t.Fatal(err)
	}
	if _, note := e.startNginxOrigin(context.Background(), a); e.tlsOrigin == "" {
		t.Fatalf("nginx origin without TLS: %s", note)
	}
	const size = 64 << 10
	if err := e.ServeObjects([]int64{size}); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(e.tlsFiles.cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: tlsServerName}}}
	resp, err := hc.Get("https://" + e.tlsOrigin + origin.ObjectPath(size))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != size || [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
		t.Errorf("GET over TLS: status %d, %d bytes, %v; want the built-in origin's %d bytes", resp.StatusCode, n, err, size)
	}
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Errorf("TLS state %+v: want TLS 1.3", resp.TLS)
	}
}

// newOriginOnlyEnv is an Env with nothing running yet, for starting
// origins alone; its processes and files go when tb ends.
func newOriginOnlyEnv(tb testing.TB) *Env {
	tb.Helper()
	dir, err := os.MkdirTemp("", "splicer-bench-test-") // under /tmp: nginx's workers can reach it
	if err != nil {
		tb.Fatal(err)
	}
	_, cancel := context.WithCancel(context.Background())
	e := &Env{dir: dir, server: local{}, Client: local{}, cancel: cancel, log: slog.New(slog.DiscardHandler)}
	tb.Cleanup(func() { e.Close() })
	return e
}

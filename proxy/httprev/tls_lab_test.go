// Lab test of TLS termination: examples/https.yaml under curl, and a certificate replaced on disk and reloaded while a transfer runs.

package httprev_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

const (
	httpsPort    = 8444 // examples/https.yaml's listener
	reloadedPort = 8445 // the same, with certificate files the test replaces
	toTLSPort    = 8446 // plain HTTP in, TLS to the origin
	tlsOrigin    = 8443 // the origin's TLS port
	bigBody      = 8 << 20
)

// TestLabHTTPS runs examples/https.yaml's listener as it is, and a copy
// of it whose certificate files the test owns: curl gets the origin's body
// over TLS and the origin sees the request came over https; a certificate
// replaced on disk and reloaded goes to new connections while a download
// on an old one runs to its end.
func TestLabHTTPS(t *testing.T) {
	l := httplab.New(t)
	var sawProto atomic.Value // the X-Forwarded-Proto the origin last saw
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, portA), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawProto.Store(r.Header.Get("X-Forwarded-Proto"))
		if r.URL.Path == "/echo" { // an upgrade to a protocol that echoes
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			brw.Flush()
			io.Copy(conn, brw)
			return
		}
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(bigBody))
			w.Write(bigContent())
			return
		}
		fmt.Fprintf(w, "origin: proto %s; %s\n", r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Forwarded"))
	}))
	example := httplab.ExampleListener(t, "../../examples/https.yaml", "secure")
	owned := example
	owned.Name, owned.Listen = "owned", httplab.FwdAddr(l, reloadedPort)
	certs := copyCertificate(t, example.TLS.Certificates[0])
	owned.TLS = &config.TLS{Certificates: []config.Certificate{certs}}
	httplab.ServeHTTPOn(t, tlsListen(t, l, httplab.ServerAddr(l, tlsOrigin), example.TLS.Certificates[0]),
		&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/big" {
				w.Header().Set("Content-Length", strconv.Itoa(bigBody))
				w.Write(bigContent())
				return
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "tls origin: %s %d bytes, tls %v\n", r.Method, len(body), r.TLS != nil)
		})})
	toTLS := httplab.Listener("to-tls", httplab.FwdAddr(l, toTLSPort), "http-reverse")
	toTLS.Routes = []config.Route{{Host: "unverified.test", Pool: "unverified"}, {Pool: "verified"}}
	toTLS.Pools = []config.Pool{
		{Name: "verified", Servers: config.Servers(httplab.ServerAddr(l, tlsOrigin)),
			TLS: &config.UpstreamTLS{ServerName: "origin.test", CAFile: example.TLS.Certificates[0].CertFile}},
		{Name: "unverified", Servers: config.Servers(httplab.ServerAddr(l, tlsOrigin)),
			TLS: &config.UpstreamTLS{ServerName: "origin.test"}}, // the host's roots do not know the origin
	}
	f := httplab.Start(t, l, example, owned, toTLS)

	t.Run("tls-upstream", func(t *testing.T) {
		base := "http://" + httplab.FwdAddr(l, toTLSPort)
		post := filepath.Join(t.TempDir(), "post")
		os.WriteFile(post, bytes.Repeat([]byte("x"), 700<<10), 0o600)
		out, err := httplab.Curl(t, l, "--data-binary", "@"+post, "-H", "Expect:", base+"/post")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("tls origin: POST %d bytes, tls true\n", 700<<10); string(out) != want {
			t.Errorf("POST through a TLS pool: %q, want %q", out, want)
		}
		out, err = httplab.Curl(t, l, base+"/big")
		if err != nil || !bytes.Equal(out, bigContent()) {
			t.Errorf("GET /big through a TLS pool: %d bytes, %v; want %d, the origin's", len(out), err, bigBody)
		}
		out, _ = httplab.Curl(t, l, "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: unverified.test", base+"/")
		if string(out) != "502" {
			t.Errorf("a server whose certificate does not verify answered %q, want 502", out)
		}
	})

	t.Run("curl", func(t *testing.T) {
		out, err := httplab.Curl(t, l, "-k", "https://"+httplab.FwdAddr(l, httpsPort)+"/")
		if err != nil {
			t.Fatal(err)
		}
		want := "origin: proto https; for=" + httplab.ClientIP(l) + ";proto=https;host=\"" + httplab.FwdAddr(l, httpsPort) + "\"\n"
		if string(out) != want {
			t.Errorf("curl got %q, want %q", out, want)
		}
		if got := sawProto.Load(); got != "https" {
			t.Errorf("the origin saw X-Forwarded-Proto %q, want https", got)
		}
	})

	t.Run("upgrade", func(t *testing.T) {
		c := dialTLS(t, l, httplab.FwdAddr(l, httpsPort))
		fmt.Fprintf(c, "GET /echo HTTP/1.1\r\nHost: shop.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade over TLS: %v, %v; want 101", resp, err)
		}
		for _, msg := range []string{"ping\n", "pong\n"} {
			c.Write([]byte(msg))
			if got, err := br.ReadString('\n'); got != msg {
				t.Fatalf("echoed over TLS after the upgrade: %q, %v; want %q", got, err, msg)
			}
		}
		c.CloseWrite()
		if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
			t.Errorf("after the client's close_notify: %q, %v; want the end", rest, err)
		}
	})

	t.Run("reload-certificate", func(t *testing.T) {
		addr := httplab.FwdAddr(l, reloadedPort)
		old := dialTLS(t, l, addr)
		before := old.ConnectionState().PeerCertificates[0]
		// A download begins on the old connection, and stops being read.
		fmt.Fprintf(old, "GET /big HTTP/1.1\r\nHost: shop.test\r\n\r\n")
		br := bufio.NewReader(old)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 1<<20)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatalf("first MiB of the download: %v", err)
		}

		fresh := writeCertificate(t, certs, "*.test")
		cfg := config.Default()
		cfg.Listeners = []config.Listener{example, owned}
		if _, err := f.Forwarder.Reload(&cfg); err != nil {
			t.Fatalf("reload: %v", err)
		}
		next := dialTLS(t, l, addr).ConnectionState().PeerCertificates[0]
		if !next.Equal(fresh) {
			t.Errorf("a new connection after the reload got the certificate with serial %v, want the new one (%v; the old one was %v)",
				next.SerialNumber, fresh.SerialNumber, before.SerialNumber)
		}

		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the download on the old connection after the reload: %v (%d bytes of the rest)", err, len(rest))
		}
		if !bytes.Equal(append(first, rest...), bigContent()) {
			t.Errorf("the download on the old connection: %d bytes, or wrong content, want %d", len(first)+len(rest), bigBody)
		}
		if got := old.ConnectionState().PeerCertificates[0]; !got.Equal(before) {
			t.Errorf("the old connection's certificate changed")
		}

		// A key that no longer matches its certificate refuses the
		// reload: the certificate in use stays.
		writeCertificate(t, config.Certificate{CertFile: filepath.Join(t.TempDir(), "c"), KeyFile: certs.KeyFile}, "*.test")
		if _, err := f.Forwarder.Reload(&cfg); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
			t.Errorf("reload with a key of another certificate: %v, want it refused", err)
		}
		if got := dialTLS(t, l, addr).ConnectionState().PeerCertificates[0]; !got.Equal(fresh) {
			t.Errorf("after a refused reload a new connection got serial %v, want %v", got.SerialNumber, fresh.SerialNumber)
		}
	})
}

// tlsListen listens on addr in the server namespace, serving TLS with c.
func tlsListen(tb testing.TB, l *lab.Lab, addr string, c config.Certificate) net.Listener {
	tb.Helper()
	pair, err := c.LoadPair()
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}})
}

// bigContent is /big's body: a counter's bytes, so a byte out of place shows.
func bigContent() []byte {
	b := make([]byte, bigBody)
	for i := range b {
		b[i] = byte(i / 4093)
	}
	return b
}

// dialTLS connects from the client namespace to addr over TLS, asking for
// shop.test, trusting any certificate (the test compares them itself).
func dialTLS(tb testing.TB, l *lab.Lab, addr string) *tls.Conn {
	tb.Helper()
	raw := httplab.Dial(tb, l, addr)
	raw.SetDeadline(time.Now().Add(3 * httplab.WaitFor))
	c := tls.Client(raw, &tls.Config{ServerName: "shop.test", InsecureSkipVerify: true})
	if err := c.Handshake(); err != nil {
		tb.Fatalf("tls handshake with %s: %v", addr, err)
	}
	return c
}

// copyCertificate copies c's files into the test's directory.
func copyCertificate(tb testing.TB, c config.Certificate) config.Certificate {
	tb.Helper()
	dir := tb.TempDir()
	out := config.Certificate{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	for from, to := range map[string]string{c.CertFile: out.CertFile, c.KeyFile: out.KeyFile} {
		data, err := os.ReadFile(from)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// writeCertificate replaces c's files with a new self-signed pair for name
// and returns its certificate.
func writeCertificate(tb testing.TB, c config.Certificate, name string) *x509.Certificate {
	tb.Helper()
	cert := testenv.SelfSigned(tb, name)
	testenv.WritePEM(tb, cert, c.CertFile, c.KeyFile)
	return cert.Leaf
}

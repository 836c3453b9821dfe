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
	e, addr, note := startNginxOrigin(t, "127.0.0.3")
	if e.objectDir == "" {
		t.Fatalf("nginx origin not started: %s", note)
	}
	const fromFile, fromFile2, builtin = 1024, 3 << 20, 5000
	if err := e.ServeObjects([]int64{fromFile, fromFile2}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fromFile, fromFile2, builtin} {
		resp := getObject(t, http.DefaultClient, "http://"+addr, size)
		if file := resp.Header.Get("Etag") != ""; file != (size != builtin) {
			t.Errorf("GET %d bytes: served from a file = %v, want %v", size, file, size != builtin)
		}
	}
}

// TestNginxOriginServesTLS checks that the nginx origin serves the
// objects over TLS with a certificate for tlsServerName, the same bytes
// as the built-in origin's.
func TestNginxOriginServesTLS(t *testing.T) {
	e, _, note := startNginxOrigin(t, "127.0.0.4")
	if e.tlsOrigin == "" {
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
	resp := getObject(t, hc, "https://"+e.tlsOrigin, size)
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Errorf("TLS state %+v: want TLS 1.3", resp.TLS)
	}
}

// startNginxOrigin starts the built-in origin and nginx in front of it on
// server (a loopback address no other test listens on), skipping the test
// where nginx is missing; it returns the Env, nginx's address and its
// note on what it could not start.
func startNginxOrigin(tb testing.TB, server string) (e *Env, addr, note string) {
	tb.Helper()
	if why := missing("nginx"); why != "" {
		tb.Skip(why)
	}
	e = newOriginOnlyEnv(tb)
	a := addressing{server: server}
	if err := e.startOrigin(local{}, a); err != nil {
		tb.Fatal(err)
	}
	addr, note = e.startNginxOrigin(context.Background(), a)
	return e, addr, note
}

// getObject fetches the object of size from base with hc and fails the
// test unless it is a 200 with the built-in origin's bytes.
func getObject(tb testing.TB, hc *http.Client, base string, size int64) *http.Response {
	tb.Helper()
	resp, err := hc.Get(base + origin.ObjectPath(size))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != size {
		tb.Fatalf("GET %s%s: status %d, %d bytes, %v", base, origin.ObjectPath(size), resp.StatusCode, n, err)
	}
	if [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
		tb.Errorf("GET %s%s: not the built-in origin's object", base, origin.ObjectPath(size))
	}
	return resp
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

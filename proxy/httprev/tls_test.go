// Tests of TLS termination's parts on loopback: certificates by server name, ticket keys' rotation, the minimum version, ALPN.

package httprev

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy"
)

// certFor writes a self-signed pair for names into dir and returns it.
func certFor(tb testing.TB, dir string, names ...string) config.Certificate {
	tb.Helper()
	cert := testenv.SelfSigned(tb, names...)
	serial := cert.Leaf.SerialNumber.String()
	c := config.Certificate{CertFile: filepath.Join(dir, serial+".crt"), KeyFile: filepath.Join(dir, serial+".key")}
	testenv.WritePEM(tb, cert, c.CertFile, c.KeyFile)
	return c
}

// serveTLS runs tt's handshakes on a loopback listener, each connection
// writing one byte (so that a TLS 1.3 client reads its session ticket)
// and closing.
func serveTLS(tb testing.TB, tt *terminator) string {
	tb.Helper()
	ln := testenv.ListenLoopback(tb)
	tb.Cleanup(tt.close)
	testenv.ServeEach(tb, ln, testenv.Wait, func(c net.Conn) {
		tc := tls.Server(c, tt.cfg)
		if tc.Handshake() == nil {
			tc.Write([]byte{1})
		}
	})
	return ln.Addr().String()
}

// hello connects to addr with cfg, reads the server's byte, and returns
// the connection's state.
func hello(tb testing.TB, addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	tb.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	c.Read(make([]byte, 1))
	return c.ConnectionState(), nil
}

// TestCertificateBySNI: a client's server name picks the certificate that
// names it, exactly or by "*.suffix", any case; anyone else gets the
// first one listed.
func TestCertificateBySNI(t *testing.T) {
	dir := t.TempDir()
	def, shop, wild := certFor(t, dir, "default.test"), certFor(t, dir, "shop.test"), certFor(t, dir, "*.api.test")
	tt, err := newTerminator(&config.TLS{Certificates: []config.Certificate{def, shop, wild}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, tt)
	for _, c := range []struct{ sni, want string }{
		{"shop.test", "shop.test"}, {"SHOP.test", "shop.test"}, {"v1.api.test", "*.api.test"},
		{"a.v1.api.test", "default.test"}, {"other.test", "default.test"}, {"", "default.test"},
	} {
		st, err := hello(t, addr, &tls.Config{ServerName: c.sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("sni %q: %v", c.sni, err)
		}
		if got := st.PeerCertificates[0].Subject.CommonName; got != c.want {
			t.Errorf("sni %q: certificate for %q, want %q", c.sni, got, c.want)
		}
		if st.NegotiatedProtocol != "" {
			t.Errorf("sni %q: ALPN %q without the client offering any", c.sni, st.NegotiatedProtocol)
		}
	}
}

// TestALPNHTTP11: a client offering h2 and http/1.1 gets http/1.1; one
// offering h2 alone is refused (HTTP/2 is not served).
func TestALPNHTTP11(t *testing.T) {
	tt, err := newTerminator(&config.TLS{Certificates: []config.Certificate{certFor(t, t.TempDir(), "shop.test")}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, tt)
	st, err := hello(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil || st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("h2 and http/1.1 offered: protocol %q, %v; want http/1.1", st.NegotiatedProtocol, err)
	}
	if _, err := hello(t, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}); err == nil {
		t.Errorf("h2 alone offered: handshake succeeded, want it refused")
	}
}

// TestMinVersion: min_version 1.3 refuses a client that goes no higher
// than 1.2, which the default takes.
func TestMinVersion(t *testing.T) {
	cert := certFor(t, t.TempDir(), "shop.test")
	only12 := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}
	for _, c := range []struct {
		min string
		ok  bool
	}{{"", true}, {"1.3", false}} {
		tt, err := newTerminator(&config.TLS{Certificates: []config.Certificate{cert}, MinVersion: c.min})
		if err != nil {
			t.Fatal(err)
		}
		_, err = hello(t, serveTLS(t, tt), only12)
		if (err == nil) != c.ok {
			t.Errorf("min_version %q, a TLS 1.2 client: handshake error %v, want success %v", c.min, err, c.ok)
		}
	}
}

// TestTicketKeysRotate: a session resumes with its ticket while its key is
// the current one or one of the two before; a third rotation retires it,
// and the client then shakes hands in full. Both versions' tickets.
func TestTicketKeysRotate(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		tt, err := newTerminator(&config.TLS{Certificates: []config.Certificate{certFor(t, t.TempDir(), "shop.test")}})
		if err != nil {
			t.Fatal(err)
		}
		addr := serveTLS(t, tt)
		cfg := &tls.Config{InsecureSkipVerify: true, ServerName: "shop.test", MaxVersion: version,
			ClientSessionCache: tls.NewLRUClientSessionCache(1)}
		if _, err := hello(t, addr, cfg); err != nil {
			t.Fatal(err)
		}
		sealed := cfg.ClientSessionCache // holds the first ticket only: resumption replaces it
		done := 0
		for rotations, want := range []bool{true, true, true, false} {
			for ; done < rotations; done++ {
				tt.keys.rotate()
			}
			one := tls.NewLRUClientSessionCache(1)
			first, _ := sealed.Get("shop.test")
			one.Put("shop.test", first)
			cfg.ClientSessionCache = one
			st, err := hello(t, addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if st.DidResume != want {
				t.Errorf("TLS %x, ticket sealed %d rotations ago: resumed %v, want %v", version, rotations, st.DidResume, want)
			}
		}
	}
}

// TestForwardedProtoHTTPS: through TLS, Forwarded says proto=https and
// X-Forwarded-Proto https.
func TestForwardedProtoHTTPS(t *testing.T) {
	fw := forwarding{proto: "https"}
	req := &http.Request{Host: "shop.test", Header: http.Header{}}
	if err := addForwarded(req, "10.99.1.2", false, &fw); err != nil {
		t.Fatal(err)
	}
	if got, want := req.Header.Get("Forwarded"), `for=10.99.1.2;proto=https;host="shop.test"`; got != want {
		t.Errorf("Forwarded = %q, want %q", got, want)
	}
	if got := req.Header.Get("X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto = %q, want https", got)
	}
}

// TestHandshakeCloseReason: a handshake that fails on what the client sent
// closes as bad_request; one the client abandoned or let time out does not.
func TestHandshakeCloseReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errors.New("tls: client offered only unsupported versions"), "bad_request"},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "proxy_error"},
		{io.EOF, "eof"},
	} {
		if got := proxy.CloseReason(handshakeFailed(c.err)); got != c.want {
			t.Errorf("handshake failed with %v: close reason %s, want %s", c.err, got, c.want)
		}
	}
}

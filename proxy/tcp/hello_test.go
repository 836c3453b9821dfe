// Tests of routing by the ClientHello in control mode: which server each hello reaches, that it reaches it whole, and what is refused.

package tcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxytest"
)

// origin is a loopback server that keeps what its connections send.
type origin struct {
	ln  *net.TCPListener
	got chan []byte // what each connection sent until it closed
}

func newOrigin(tb testing.TB) *origin {
	tb.Helper()
	o := &origin{ln: testenv.ListenLoopback(tb), got: make(chan []byte, 8)}
	testenv.ServeEach(tb, o.ln, 5*time.Second, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		o.got <- b
	})
	return o
}

func (o *origin) addr() string { return o.ln.Addr().String() }

// received is what each connection that reached o sent, waiting a
// little for those under way.
func (o *origin) received(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for {
		select {
		case b := <-o.got:
			out = append(out, b)
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}

// helloLab is a router with pools a and b (a also the default, unless
// noDefault), each one origin, and the routes of examples/sni.yaml and
// one more: *.b.test offering h2 goes to b.
type helloLab struct {
	a, b *origin
	lc   config.Listener
}

func newHelloLab(tb testing.TB, noDefault bool) *helloLab {
	tb.Helper()
	hl := &helloLab{a: newOrigin(tb), b: newOrigin(tb)}
	hl.lc = config.DefaultListener()
	hl.lc.Pools = []config.Pool{{Name: "a", Servers: config.Servers(hl.a.addr())}, {Name: "b", Servers: config.Servers(hl.b.addr())}}
	hl.lc.TLSRoutes = []config.TLSRoute{{ServerName: "A.test", Pool: "a"}, {ServerName: "b.test", Pool: "b"}, {ServerName: "*.B.test", ALPN: "h2", Pool: "b"}}
	if !noDefault {
		hl.lc.DefaultPool = "a"
	}
	return hl
}

// connect runs the proxy's connect for a client that sends what send
// writes, and returns what the client then read and connect's error.
func (hl *helloLab) connect(tb testing.TB, timeout time.Duration, send func(c net.Conn)) ([]byte, error) {
	tb.Helper()
	c := enginetest.NewPair(tb)
	c.Pair.SetUpstream(nil)
	s := &proxytest.Session{P: c.Pair, DialFunc: func(ctx context.Context, addr string) (*net.TCPConn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		tb.Cleanup(func() { conn.Close() })
		return conn.(*net.TCPConn), nil
	}}
	lc := hl.lc
	lc.RequestTimeout = config.Duration(timeout)
	p := &Proxy{Hello: NewHelloRouter(lc, nil, nil)}
	go send(c.Client)
	srv, err := p.connect(context.Background(), s)
	if srv != nil {
		srv.Release()
	}
	if up := c.Pair.Upstream(); up != nil {
		up.Close() // the origin has what was sent
	}
	c.Pair.Client.Close()
	c.Client.SetReadDeadline(time.Now().Add(5 * time.Second))
	back, _ := io.ReadAll(c.Client)
	return back, err
}

// goHello sends Go's TLS client's hello for cfg, and keeps what it sent.
func goHello(cfg *tls.Config, sent *bytes.Buffer, oneByte bool) func(c net.Conn) {
	return func(c net.Conn) {
		rec := &recorder{Conn: c, sent: sent, oneByte: oneByte}
		tls.Client(rec, cfg).Handshake() // ends when the connection does
	}
}

// sendBytes sends b.
func sendBytes(b []byte) func(c net.Conn) { return func(c net.Conn) { c.Write(b) } }

// recorder keeps what is written through it, written one byte per write
// with oneByte.
type recorder struct {
	net.Conn
	sent    *bytes.Buffer
	oneByte bool
}

func (r *recorder) Write(b []byte) (int, error) {
	r.sent.Write(b)
	if !r.oneByte {
		return r.Conn.Write(b)
	}
	for i := range b {
		if _, err := r.Conn.Write(b[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(b), nil
}

func TestHelloPicksThePool(t *testing.T) {
	hl := newHelloLab(t, false)
	for _, tc := range []struct {
		name    string
		cfg     *tls.Config
		oneByte bool
		want    string
	}{
		{"a", &tls.Config{ServerName: "a.test"}, false, "a"},
		{"b", &tls.Config{ServerName: "B.Test"}, false, "b"},
		{"b-one-byte-writes", &tls.Config{ServerName: "b.test"}, true, "b"},
		{"wildcard-h2", &tls.Config{ServerName: "x.y.b.test", NextProtos: []string{"http/1.1", "h2"}}, false, "b"},
		{"wildcard-without-h2", &tls.Config{ServerName: "x.b.test", NextProtos: []string{"http/1.1"}}, false, "a"},
		{"suffix-after", &tls.Config{ServerName: "b.test.evil", NextProtos: []string{"h2"}}, false, "a"},
		{"suffix-without-dot", &tls.Config{ServerName: "evilb.test", NextProtos: []string{"h2"}}, false, "a"},
		{"no-sni", &tls.Config{InsecureSkipVerify: true}, false, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent bytes.Buffer
			_, err := hl.connect(t, time.Second, goHello(tc.cfg, &sent, tc.oneByte))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][][]byte{"a": hl.a.received(t), "b": hl.b.received(t)}
			if len(got[tc.want]) != 1 || len(got["a"])+len(got["b"]) != 1 {
				t.Fatalf("connections reached a %d, b %d; want one at %s", len(got["a"]), len(got["b"]), tc.want)
			}
			if b := got[tc.want][0]; !bytes.Equal(b, sent.Bytes()) || len(b) == 0 {
				t.Errorf("the server got %d bytes, not the %d of the client's hello", len(b), sent.Len())
			}
		})
	}
}

// TestHelloRefused: what is refused reaches no server, closes with the
// reason counted, and a name served nowhere is told to the client.
func TestHelloRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noDefault bool
		send      func(c net.Conn)
		reason    string
		back      []byte
	}{
		{"no-route", true, sendBytes(testenv.GoHello(t, &tls.Config{ServerName: "c.test"})), ReasonNoRoute, alertUnrecognizedName},
		{"no-sni-no-default", true, sendBytes(testenv.GoHello(t, &tls.Config{InsecureSkipVerify: true})), ReasonNoRoute, alertUnrecognizedName},
		{"http", false, func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n") }, ReasonBadHello, nil},
		{"cut-short", false, func(c net.Conn) { c.Write([]byte{22, 3, 1, 0, 200, 1, 0, 0, 196}); c.(*net.TCPConn).CloseWrite() }, ReasonBadHello, nil},
		{"too-large", false, func(c net.Conn) { c.Write([]byte{22, 3, 1, 0, 4, 1, 0, 0x50, 0}) }, ReasonTooLarge, nil},
		{"slow", false, func(c net.Conn) { c.Write([]byte{22, 3, 1, 0, 200, 1, 0, 0, 196}) }, ReasonTimeout, nil},
		{"closed-at-once", false, func(c net.Conn) { c.(*net.TCPConn).CloseWrite() }, "eof", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hl := newHelloLab(t, tc.noDefault)
			back, err := hl.connect(t, 300*time.Millisecond, tc.send)
			if tc.reason == "eof" {
				if !errors.Is(err, io.EOF) {
					t.Errorf("got %v, want io.EOF (Serve returns nil)", err)
				}
			} else if got := proxy.CloseReason(err); got != tc.reason {
				t.Errorf("close reason %q (%v), want %q", got, err, tc.reason)
			}
			if n := len(hl.a.received(t)) + len(hl.b.received(t)); n != 0 {
				t.Errorf("%d connections reached the servers, want none", n)
			}
			if !bytes.Equal(back, tc.back) {
				t.Errorf("the client read %x, want %x", back, tc.back)
			}
		})
	}
}

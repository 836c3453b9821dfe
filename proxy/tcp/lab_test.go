// Lab test of TLS passthrough routed by SNI: examples/sni.yaml in front of two TLS origins, each name reaching its own, the pairs spliced by ip.

package tcp_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// Ports of examples/sni.yaml: its listener, its two origins; and a second
// listener, the example's without a default_pool.
const (
	sniPort    = 8443
	strictPort = 8444
	portA      = 9443
	portB      = 9444
)

// tlsOrigin is an HTTPS server in the lab's server namespace that answers
// every request with its name, and counts the ClientHellos it read.
type tlsOrigin struct {
	name   string
	hellos atomic.Int64
}

// serveTLS starts an origin named name on addr with cert.
func serveTLS(tb testing.TB, l *lab.Lab, addr, name string, cert tls.Certificate) *tlsOrigin {
	tb.Helper()
	o := &tlsOrigin{name: name}
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		o.hellos.Add(1)
		return nil, nil
	}}
	httplab.ServeHTTPOn(tb, tls.NewListener(ln, cfg), &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "origin %s\n", name)
		}),
		ReadHeaderTimeout: httplab.WaitFor,
		ErrorLog:          log.New(io.Discard, "", 0), // the pools' connect checks end without a handshake
	})
	return o
}

type sniLab struct {
	*httplab.Forwarder
	a, b  *tlsOrigin
	admin string
}

func TestLabSNI(t *testing.T) {
	l := httplab.New(t)
	cert := testenv.SelfSigned(t, "a.test", "b.test")
	sl := &sniLab{
		a: serveTLS(t, l, httplab.ServerAddr(l, portA), "a", cert),
		b: serveTLS(t, l, httplab.ServerAddr(l, portB), "b", cert),
	}
	example := httplab.ExampleListener(t, "../../examples/sni.yaml", "sni")
	if example.Engine != "auto" {
		t.Fatalf("the example's engine is %q, want auto", example.Engine)
	}
	strict := example
	strict.Name, strict.Listen, strict.DefaultPool = "strict", httplab.FwdAddr(l, strictPort), ""
	sl.Forwarder = httplab.Start(t, l, example, strict)
	if reason := sl.Engines.Reason(ip.Name); reason != "" {
		testenv.SkipOrFail(t, "engine ip unavailable on this host: "+reason)
	}
	srv := httptest.NewServer(admin.Handler(sl.Forwarder.Forwarder))
	t.Cleanup(srv.Close)
	sl.admin = srv.URL

	t.Run("curl", sl.testCurl)
	t.Run("spliced-by-ip", sl.testSplicedByIP)
	t.Run("one-byte-segments", sl.testOneByteSegments)
	t.Run("no-sni-default", sl.testNoSNI)
	t.Run("no-sni-refused", sl.testNoSNIRefused)
	t.Run("not-tls", sl.testNotTLS)
}

// testCurl: curl, told that a.test and b.test are the listener's
// address, reaches each name's own origin.
func (sl *sniLab) testCurl(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		host := name + ".test"
		out, err := httplab.Curl(t, sl.Lab, "--resolve", fmt.Sprintf("%s:%d:%s", host, sniPort, sl.Lab.Cfg.FwdClient.Addr()),
			"-k", fmt.Sprintf("https://%s:%d/", host, sniPort))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(out), "origin "+name+"\n"; got != want {
			t.Errorf("curl https://%s:%d/ got %q, want %q", host, sniPort, got, want)
		}
	}
}

// testSplicedByIP: with a connection open to each name, /flows shows
// each pair spliced by ip, to its name's origin.
func (sl *sniLab) testSplicedByIP(t *testing.T) {
	for _, tc := range []struct {
		name string
		port uint16
	}{{"a", portA}, {"b", portB}} {
		c := sl.get(t, sniPort, &tls.Config{ServerName: tc.name + ".test", InsecureSkipVerify: true}, nil, "origin "+tc.name)
		upstream := httplab.ServerAddr(sl.Lab, tc.port)
		var last []forwarder.Flow
		defer func() {
			if t.Failed() {
				t.Logf("client %s; /flows: %+v", c.LocalAddr(), last)
			}
		}()
		testenv.Eventually(t, "the "+tc.name+".test pair spliced by ip in /flows", func() bool {
			last = sl.flows(t)
			for _, f := range last {
				if f.Listener == "sni" && f.Client == c.LocalAddr().String() {
					return f.State == "spliced" && f.Engine == ip.Name && f.Upstream == upstream
				}
			}
			return false
		})
		c.Close()
	}
}

// testOneByteSegments: a hello sent one byte per TCP segment routes as
// it does whole.
func (sl *sniLab) testOneByteSegments(t *testing.T) {
	slow := func(c net.Conn) net.Conn { return &oneByteWriter{Conn: c} }
	for _, name := range []string{"b", "a"} {
		// X25519 alone: a hello of 300 bytes rather than 1,500 with a
		// post-quantum key share, so 300 segments.
		cfg := &tls.Config{ServerName: name + ".test", InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{tls.X25519}}
		c := sl.get(t, sniPort, cfg, slow, "origin "+name)
		c.Close()
	}
}

// testNoSNI: a hello without a server name takes default_pool (a).
func (sl *sniLab) testNoSNI(t *testing.T) {
	c := sl.get(t, sniPort, &tls.Config{InsecureSkipVerify: true}, nil, "origin a")
	c.Close()
}

// testNoSNIRefused: without a default_pool, a hello without a server
// name, or with one no route takes, is refused: no origin read a hello,
// the client's handshake fails on an unrecognized_name alert and the
// pair is counted as no_route.
func (sl *sniLab) testNoSNIRefused(t *testing.T) {
	before := sl.a.hellos.Load() + sl.b.hellos.Load()
	conn := httplab.Dial(t, sl.Lab, httplab.FwdAddr(sl.Lab, strictPort))
	conn.SetDeadline(time.Now().Add(httplab.WaitFor))
	err := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake: %v, want the alert unrecognized name", err)
	}
	// A name no route takes, with curl: it says why.
	_, err = httplab.Curl(t, sl.Lab, "--resolve", fmt.Sprintf("c.test:%d:%s", strictPort, sl.Lab.Cfg.FwdClient.Addr()),
		"-k", fmt.Sprintf("https://c.test:%d/", strictPort))
	if err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("curl https://c.test:%d/: %v, want the alert unrecognized name", strictPort, err)
	}
	testenv.Eventually(t, "the refusals counted", func() bool {
		return sl.Metric("splicer_connections_closed_total", "listener", "strict", "reason", "no_route") == 2
	})
	if n := sl.a.hellos.Load() + sl.b.hellos.Load() - before; n != 0 {
		t.Errorf("the origins read %d hellos, want none", n)
	}
}

// testNotTLS: a client that speaks HTTP to the listener is closed,
// counted as bad_hello, and reaches no origin.
func (sl *sniLab) testNotTLS(t *testing.T) {
	before := sl.a.hellos.Load() + sl.b.hellos.Load()
	conn := httplab.Dial(t, sl.Lab, httplab.FwdAddr(sl.Lab, sniPort))
	conn.SetDeadline(time.Now().Add(httplab.WaitFor))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
	if b, err := io.ReadAll(conn); len(b) != 0 || err != nil {
		t.Errorf("the client read %q, %v; want a clean close", b, err)
	}
	testenv.Eventually(t, "the refusal counted", func() bool {
		return sl.Metric("splicer_connections_closed_total", "listener", "sni", "reason", "bad_hello") == 1
	})
	if n := sl.a.hellos.Load() + sl.b.hellos.Load() - before; n != 0 {
		t.Errorf("the origins read %d hellos, want none", n)
	}
}

// get connects to the listener on port with cfg (its connection wrapped
// by wrap, if given), GETs / and checks the answer is want. It returns
// the connection, still open.
func (sl *sniLab) get(t *testing.T, port uint16, cfg *tls.Config, wrap func(net.Conn) net.Conn, want string) *tls.Conn {
	t.Helper()
	var conn net.Conn = httplab.Dial(t, sl.Lab, httplab.FwdAddr(sl.Lab, port))
	conn.SetDeadline(time.Now().Add(2 * httplab.WaitFor))
	if wrap != nil {
		conn = wrap(conn)
	}
	c := tls.Client(conn, cfg)
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", cfg.ServerName)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET / with server name %q: %v", cfg.ServerName, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(len(want)+1)))
	if got := strings.TrimSpace(string(body)); got != want {
		t.Fatalf("server name %q reached %q, want %q", cfg.ServerName, got, want)
	}
	return c
}

// flows is GET /flows.
func (sl *sniLab) flows(t *testing.T) []forwarder.Flow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), httplab.WaitFor)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sl.admin+"/flows", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fl []forwarder.Flow
	if err := json.NewDecoder(resp.Body).Decode(&fl); err != nil {
		t.Fatal(err)
	}
	return fl
}

// oneByteWriter writes its first 4 KiB (the ClientHello) one byte per
// write, a millisecond apart: with TCP_NODELAY (Go's default), one byte
// per segment.
type oneByteWriter struct {
	net.Conn
	written int
}

func (w *oneByteWriter) Write(b []byte) (int, error) {
	if w.written >= 4<<10 {
		return w.Conn.Write(b)
	}
	for i := range b {
		if _, err := w.Conn.Write(b[i : i+1]); err != nil {
			return i, err
		}
		w.written++
		time.Sleep(time.Millisecond)
	}
	return len(b), nil
}

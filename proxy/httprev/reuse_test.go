// http-reverse's pool of idle upstream connections: shared across client connections and servers, a connection the server closed skipped, idempotent requests retried once and others not, PROXY protocol connections never shared.

package httprev_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// countingBackend is an HTTP/1.1 back-end that numbers its connections and
// answers each request with its connection's number (X-Conn) and a body
// of the size /obj/SIZE asks for (else 2 bytes). A hook may take a request
// over first (answer it, or close the connection) and says so.
type countingBackend struct {
	addr  string
	conns atomic.Int32
	mu    sync.Mutex
	seen  map[string]int // requests by "METHOD path"
}

// backendHook sees each request, its connection's number and how many
// times the back-end has seen the same method and path (this one
// included); it returns true when it dealt with the request itself.
type backendHook func(c net.Conn, req *http.Request, conn, seen int) bool

func newCountingBackend(tb testing.TB, hook backendHook) *countingBackend {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	b := &countingBackend{addr: ln.Addr().String(), seen: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c, int(b.conns.Add(1)), hook)
		}
	}()
	return b
}

func (b *countingBackend) serve(c net.Conn, conn int, hook backendHook) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	testenv.EachRequest(bufio.NewReader(c), func(req *http.Request, _ []byte) bool {
		b.mu.Lock()
		b.seen[req.Method+" "+req.URL.Path]++
		seen := b.seen[req.Method+" "+req.URL.Path]
		b.mu.Unlock()
		if hook != nil && hook(c, req, conn, seen) {
			return true
		}
		size := 2
		if s, ok := strings.CutPrefix(req.URL.Path, "/obj/"); ok {
			size, _ = strconv.Atoi(s)
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Conn: %d\r\nContent-Length: %d\r\n\r\n", conn, size)
		c.Write(objectBody(size))
		return true
	})
}

// Seen is how many requests for method and path the back-end got.
func (b *countingBackend) Seen(method, path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[method+" "+path]
}

// objectBody is the body of /obj/size: every byte differs from its
// neighbours', so a shifted or mixed-up body does not compare equal.
func objectBody(size int) []byte {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i % 251)
	}
	return body
}

// client is one client connection to a listener.
type client struct {
	tb testing.TB
	c  net.Conn
	r  *bufio.Reader
}

func dialClient(tb testing.TB, f *forwarder.Forwarder) *client {
	tb.Helper()
	c := fwdtest.DialFor(tb, f.Addr("rev").String(), 10*time.Second)
	return &client{tb: tb, c: c, r: bufio.NewReader(c)}
}

// do sends a request without a body and returns the response's status,
// X-Conn and body.
func (cl *client) do(method, path string) (status int, conn string, body []byte) {
	cl.tb.Helper()
	fmt.Fprintf(cl.c, "%s %s HTTP/1.1\r\nHost: app.example\r\nContent-Length: 0\r\n\r\n", method, path)
	resp, err := http.ReadResponse(cl.r, nil)
	if err != nil {
		cl.tb.Fatalf("%s %s: %v", method, path, err)
	}
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		cl.tb.Fatalf("%s %s: body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Conn"), body
}

// get fetches /obj/size, checks the body and returns the X-Conn it came with.
func (cl *client) get(size int) string {
	cl.tb.Helper()
	status, conn, body := cl.do("GET", "/obj/"+strconv.Itoa(size))
	if status != http.StatusOK || !bytes.Equal(body, objectBody(size)) {
		cl.tb.Fatalf("GET /obj/%d: status %d, %d bytes (want 200, the object)", size, status, len(body))
	}
	return conn
}

// close closes the client connection and waits until the pair parked its
// upstream connection: the pool then holds idle connections to server.
func (cl *client) close(f *forwarder.Forwarder, server string, idle int) {
	cl.tb.Helper()
	cl.c.Close()
	fwdtest.WaitMetric(cl.tb, f, float64(idle), "splicer_upstream_pool_idle", "listener", "rev", "server", server)
}

// poolCount is splicer_upstream_pool_total for server and result.
func poolCount(f *forwarder.Forwarder, server, result string) float64 {
	return fwdtest.Metric(f, "splicer_upstream_pool_total", "listener", "rev", "server", server, "result", result)
}

// TestUpstreamPoolSharedAcrossClients: a second client connection's
// request goes out on the connection the first one's left in the pool,
// after a body spliced through the engine on it: the server sees one
// connection.
func TestUpstreamPoolSharedAcrossClients(t *testing.T) {
	for _, engine := range []string{"copy", "pipe", "sockmap"} {
		t.Run(engine, func(t *testing.T) {
			b := newCountingBackend(t, nil)
			f := fwdtest.ReverseProxy(t, engine, "", b.addr)
			a := dialClient(t, f)
			first := a.get(1 << 20) // spliced with a byte limit
			a.get(10)
			a.close(f, b.addr, 1)
			c := dialClient(t, f)
			if got := c.get(100 << 10); got != first {
				t.Errorf("second client's request on upstream connection %s, want %s (the pooled one)", got, first)
			}
			if n := b.conns.Load(); n != 1 {
				t.Errorf("server accepted %d connections, want 1", n)
			}
			if hit, miss := poolCount(f, b.addr, "hit"), poolCount(f, b.addr, "miss"); hit != 1 || miss != 1 {
				t.Errorf("pool hits %v, misses %v; want 1 and 1", hit, miss)
			}
		})
	}
}

// TestUpstreamPoolAcrossServers: a keep-alive client routed to another
// server takes the idle connection to it instead of dialling, and leaves
// its own in the pool.
func TestUpstreamPoolAcrossServers(t *testing.T) {
	s1, s2 := newCountingBackend(t, nil), newCountingBackend(t, nil)
	f := fwdtest.ReverseProxy(t, "auto", "", s1.addr, s2.addr)
	a := dialClient(t, f)
	a.get(10) // round robin: s1
	a.close(f, s1.addr, 1)
	b := dialClient(t, f)
	for range 4 {
		b.get(1000) // s2, s1, s2, s1
	}
	if n1, n2 := s1.conns.Load(), s2.conns.Load(); n1 != 1 || n2 != 1 {
		t.Errorf("servers accepted %d and %d connections, want 1 each", n1, n2)
	}
	if s1.Seen("GET", "/obj/1000") != 2 || s2.Seen("GET", "/obj/1000") != 2 {
		t.Errorf("requests not balanced: s1 %d, s2 %d", s1.Seen("GET", "/obj/1000"), s2.Seen("GET", "/obj/1000"))
	}
	if hits := poolCount(f, s1.addr, "hit") + poolCount(f, s2.addr, "hit"); hits != 3 {
		t.Errorf("%v pool hits, want 3 (every switch of server after the first)", hits)
	}
}

// TestUpstreamPoolSkipsClosedConnection: a pooled connection the server
// closed meanwhile (its keep-alive timeout) is found closed and dropped
// before a request goes out on it; the client sees nothing of it.
func TestUpstreamPoolSkipsClosedConnection(t *testing.T) {
	closed := make(chan struct{})
	b := newCountingBackend(t, func(c net.Conn, req *http.Request, conn, seen int) bool {
		if req.URL.Path != "/then-close" {
			return false
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(20 * time.Millisecond) // parked by then
		c.Close()
		close(closed)
		return true
	})
	f := fwdtest.ReverseProxy(t, "auto", "", b.addr)
	a := dialClient(t, f)
	a.do("GET", "/then-close")
	a.close(f, b.addr, 1)
	<-closed
	time.Sleep(20 * time.Millisecond) // the FIN crosses loopback
	c := dialClient(t, f)
	if conn := c.get(10); conn != "2" {
		t.Errorf("request after the server closed the pooled connection went on connection %q, want a new one (2)", conn)
	}
	// Taken, the connection would have failed the request and a retry
	// hidden it: a hit, not a stale connection.
	if stale, hit := poolCount(f, b.addr, "stale"), poolCount(f, b.addr, "hit"); stale != 1 || hit != 0 {
		t.Errorf("pool stale %v, hits %v; want 1 and 0", stale, hit)
	}
}

// TestUpstreamPoolFirstRequestUnsafe: a client connection's first request,
// when it could not be retried (POST), goes out on a new connection, not a
// pooled one the server may be closing (HAProxy's http-reuse safe).
func TestUpstreamPoolFirstRequestUnsafe(t *testing.T) {
	b := newCountingBackend(t, nil)
	f := fwdtest.ReverseProxy(t, "auto", "", b.addr)
	a := dialClient(t, f)
	a.get(10)
	a.close(f, b.addr, 1)
	c := dialClient(t, f)
	if status, conn, _ := c.do("POST", "/obj/10"); status != http.StatusOK || conn != "2" {
		t.Errorf("first request POST: status %d on connection %q, want 200 on a new one (2)", status, conn)
	}
	if idle := fwdtest.Metric(f, "splicer_upstream_pool_idle", "listener", "rev", "server", b.addr); idle != 1 {
		t.Errorf("%v idle connections after the POST, want 1 (left in the pool)", idle)
	}
	if conn := c.get(10); conn != "2" { // kept for the next request to the server
		t.Errorf("second request on connection %q, want 2", conn)
	}
}

// TestUpstreamRetry: a request that fails on a reused connection before a
// byte of its response came is sent once more on a new connection if it
// is idempotent (GET, DELETE), never otherwise (POST gets 502).
func TestUpstreamRetry(t *testing.T) {
	b := newCountingBackend(t, func(c net.Conn, req *http.Request, conn, seen int) bool {
		if req.URL.Path != "/die-once" || seen > 1 {
			return false
		}
		c.Close() // as if the connection's keep-alive timed out just now
		return true
	})
	f := fwdtest.ReverseProxy(t, "auto", "", b.addr)
	for _, tc := range []struct {
		method string
		status int
		seen   int
	}{{"GET", http.StatusOK, 2}, {"DELETE", http.StatusOK, 2}, {"POST", http.StatusBadGateway, 1}} {
		cl := dialClient(t, f)
		cl.get(10) // the upstream connection is kept: the next request reuses it
		status, _, _ := cl.do(tc.method, "/die-once")
		if status != tc.status || b.Seen(tc.method, "/die-once") != tc.seen {
			t.Errorf("%s on a connection closed under it: status %d, the server saw it %d times; want %d and %d",
				tc.method, status, b.Seen(tc.method, "/die-once"), tc.status, tc.seen)
		}
		b.mu.Lock()
		clear(b.seen)
		b.mu.Unlock()
	}
}

// TestProxyProtocolConnectionsPrivate: with proxy_protocol, each upstream
// connection gets the header once, before its first request, and is never
// handed to another client connection, whose address the header would
// misstate.
func TestProxyProtocolConnectionsPrivate(t *testing.T) {
	var mu sync.Mutex
	headers := map[int]string{} // connection number: the header's source
	b := newCountingBackend(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // in front of b: reads the header, then passes the bytes on
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				info, err := proxyproto.Read(r)
				if err != nil {
					return
				}
				mu.Lock()
				headers[n] = info.Source.String()
				mu.Unlock()
				up, err := net.Dial("tcp", b.addr)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, r) // a second header would reach b as a bad request
				io.Copy(c, up)
			}()
		}
	}()
	f := fwdtest.ReverseProxy(t, "auto", ", proxy_protocol: v1", ln.Addr().String())
	a := dialClient(t, f)
	for range 3 {
		if conn := a.get(100); conn != "1" {
			t.Errorf("client A on upstream connection %s, want 1 for each request", conn)
		}
	}
	a.c.Close()
	c := dialClient(t, f)
	if conn := c.get(100); conn != "2" {
		t.Errorf("client C on upstream connection %s, want a new one (2)", conn)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[int]string{1: a.c.LocalAddr().String(), 2: c.c.LocalAddr().String()}
	if len(headers) != 2 || headers[1] != want[1] || headers[2] != want[2] {
		t.Errorf("headers by upstream connection %v, want %v", headers, want)
	}
}

// TestUpstreamPoolConnectionClose: clients that open a connection per
// request (Connection: close, or HTTP/1.0 without keep-alive) are each
// answered and closed, while their requests go out with keep-alive on
// one pooled upstream connection: the server accepts it once, and no
// request asks it to close.
func TestUpstreamPoolConnectionClose(t *testing.T) {
	var asked atomic.Int32 // requests that asked the server to close
	b := newCountingBackend(t, func(c net.Conn, req *http.Request, conn, seen int) bool {
		if req.Close {
			asked.Add(1)
		}
		return false
	})
	f := fwdtest.ReverseProxy(t, "auto", "", b.addr)
	for i, proto := range []string{"HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.1"} {
		c := fwdtest.DialFor(t, f.Addr("rev").String(), 10*time.Second)
		closing := "Connection: close\r\n"
		if proto == "HTTP/1.0" {
			closing = "" // closes unless it asks for keep-alive
		}
		fmt.Fprintf(c, "GET /obj/100 %s\r\nHost: app.example\r\n%s\r\n", proto, closing)
		resp, err := io.ReadAll(c) // to the proxy's close
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, proto, err)
		}
		head, body, _ := bytes.Cut(resp, []byte("\r\n\r\n"))
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) || !bytes.Equal(body, objectBody(100)) {
			t.Fatalf("request %d (%s): %q, want 200 and the object, then the close", i, proto, head)
		}
		c.Close()
		fwdtest.WaitMetric(t, f, 1, "splicer_upstream_pool_idle", "listener", "rev", "server", b.addr)
	}
	if n := b.conns.Load(); n != 1 {
		t.Errorf("server accepted %d connections for 4 closing clients, want 1 (pooled)", n)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("%d requests asked the server to close, want none", n)
	}
	if hits := poolCount(f, b.addr, "hit"); hits != 3 {
		t.Errorf("%v pool hits, want 3", hits)
	}
}

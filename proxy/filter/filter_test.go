// Loopback tests through a real forwarder and a Go HTTP origin: allowed and blocked traffic, keep-alive, both body framings, bad input, PROXY protocol.

package filter_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
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
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/filter"
	"github.com/splicer/splicer/proxy/proxyproto"
	"github.com/splicer/splicer/proxy/proxytest"
)

const waitFor = 10 * time.Second

// origin is a Go HTTP server that counts its connections and requests and
// records the PROXY protocol headers it received, if told to expect them.
type origin struct {
	addr     string
	conns    atomic.Int64
	requests atomic.Int64
	mu       sync.Mutex
	headers  []proxyproto.Info
}

// payload is deterministic data of n bytes.
func payload(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}

func startOrigin(tb testing.TB, proxyProtocol bool) *origin {
	tb.Helper()
	o := &origin{}
	mux := http.NewServeMux()
	mux.HandleFunc("/obj/{size}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("size"))
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write(payload(n))
	})
	mux.HandleFunc("/type/{major}/{minor}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.PathValue("major")+"/"+r.PathValue("minor")+"; charset=utf-8")
		w.Write(payload(100 << 10))
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.New()
		n, _ := io.Copy(sum, r.Body)
		fmt.Fprintf(w, "%d %x", n, sum.Sum(nil))
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin "+r.URL.Path) })
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.requests.Add(1)
			mux.ServeHTTP(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				o.conns.Add(1)
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	o.addr = ln.Addr().String()
	var l net.Listener = ln
	if proxyProtocol {
		l = &headerListener{Listener: ln, o: o}
	}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return o
}

// headerListener reads a PROXY protocol header from each connection before
// net/http sees it.
type headerListener struct {
	net.Listener
	o *origin
}

func (l *headerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(waitFor))
	info, err := proxyproto.Read(r)
	c.SetReadDeadline(time.Time{})
	if err == nil {
		l.o.mu.Lock()
		l.o.headers = append(l.o.headers, info)
		l.o.mu.Unlock()
	}
	return &bufConn{Conn: c, r: r}, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// filterListener is a filter listener on loopback in front of upstream.
func filterListener(upstream string) config.Listener {
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Proxy, lc.Upstream = "filter", "127.0.0.1:0", "filter", config.Servers(upstream)
	lc.Filter = &config.Filter{BlockPaths: []string{"/admin/*", "*.exe"}, BlockContentTypes: []string{"image/*", "application/zip"}}
	return lc
}

// client is an HTTP client whose connections all go to the filter.
func client(tb testing.TB, f *forwarder.Forwarder) *http.Client {
	addr := f.Addr("filter").String()
	tr := &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
	}
	// Idle keep-alive connections would hold the forwarder's shutdown.
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: waitFor, Transport: tr}
}

func get(tb testing.TB, c *http.Client, path string) (*http.Response, []byte) {
	tb.Helper()
	resp, err := c.Get("http://origin.test" + path)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: body: %v", path, err)
	}
	return resp, body
}

func TestAllowedTrafficOnOneConnection(t *testing.T) {
	o, f := startFilter(t)
	c := client(t, f)
	for _, path := range []string{"/obj/1000", "/obj/8388608", "/obj/3000000?chunked=1", "/type/text/html", "/admin", "/empty", "/obj/0"} {
		resp, body := get(t, c, path)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		var n int
		if _, err := fmt.Sscanf(path, "/obj/%d", &n); err == nil && sha256.Sum256(body) != sha256.Sum256(payload(n)) {
			t.Errorf("GET %s: %d bytes with the wrong sha256", path, len(body))
		}
		if path == "/obj/3000000?chunked=1" && resp.ContentLength != -1 {
			t.Errorf("GET %s: Content-Length %d; the origin sent it chunked and the filter must stream it so", path, resp.ContentLength)
		}
	}
	req, _ := http.NewRequest("HEAD", "http://origin.test/obj/5000", nil)
	if resp, err := c.Do(req); err != nil || resp.ContentLength != 5000 {
		t.Fatalf("HEAD: %v, %v", resp, err)
	}
	for _, size := range []int{0, 1, 5 << 20} {
		for _, chunked := range []bool{false, true} {
			data := payload(size)
			var body io.Reader = bytes.NewReader(data)
			if chunked {
				body = io.MultiReader(body) // hides the length: net/http sends it chunked
			}
			resp, err := c.Post("http://origin.test/upload", "application/octet-stream", body)
			if err != nil {
				t.Fatalf("POST %d bytes (chunked %v): %v", size, chunked, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("%d %x", size, sha256.Sum256(data)); string(got) != want {
				t.Errorf("POST %d bytes (chunked %v): origin saw %q, want %q", size, chunked, got, want)
			}
		}
	}
	if n := o.conns.Load(); n != 1 {
		t.Errorf("the origin saw %d connections for %d requests, want 1 (keep-alive through the filter)", n, o.requests.Load())
	}
}

// TestBlockedPath sends, to an origin that would serve anything, each
// spelling of a blocked path that an origin may read as the blocked one:
// the filter answers 403 (blocked) or 400 (a target origins read in more
// than one way), and no byte reaches the origin.
func TestBlockedPath(t *testing.T) {
	o := proxytest.NewLenientOrigin(t)
	f := fwdtest.Start(t, filterListener(o.Addr)) // /admin/* and *.exe
	addr := f.Addr("filter").String()
	for target, status := range map[string]int{
		"/admin/users":                403,
		"/admin/users/list":           403, // /* is the whole subtree
		"/ADMIN/users":                403, // a case-insensitive origin
		"/admin;x/users":              403, // Tomcat drops ;params
		"/admin./users":               403, // Windows drops trailing dots
		"//admin/users":               403,
		"/%61dmin/users":              403,
		"/setup.exe":                  403,
		"/x.exe;.txt":                 403,
		"/x.exe/info":                 403, // PATH_INFO runs x.exe
		"http://origin.test/admin/x":  403,
		`/admin\users`:                400, // IIS reads \ as /
		"/admin%2fusers":              400,
		"/admin/users%2f..%2f..%2fok": 400,
		"/x/../admin/panel":           400,
		"/public/..;/admin/panel":     400, // Tomcat reads ..; as ..
		"/public/%2e%2e/admin/panel":  400,
		"/admin%252fusers":            400, // an origin that decodes twice
		"/admin%00/users":             400,
	} {
		t.Run(target, func(t *testing.T) {
			resp := o.Refused(t, addr, "GET "+target+" HTTP/1.1\r\nHost: origin.test\r\n\r\n")
			if resp.StatusCode != status || !resp.Close {
				t.Errorf("GET %s: %s (close %v), want %d and close", target, resp.Status, resp.Close, status)
			}
		})
	}
	if resp, body := get(t, client(t, f), "/public/x"); resp.StatusCode != 200 || string(body) != proxytest.LenientBody || o.Requests() != 1 {
		t.Errorf("GET /public/x: %s %q, %d requests at the origin; want 200 from the origin and 1", resp.Status, body, o.Requests())
	}
}

func TestBlockedContentType(t *testing.T) {
	o, f := startFilter(t)
	c := client(t, f)
	for _, path := range []string{"/type/image/png", "/type/IMAGE/jpeg", "/type/application/zip"} {
		resp, body := get(t, c, path)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "content type") {
			t.Errorf("GET %s: %s %q, want 403", path, resp.Status, body)
		}
	}
	// The client connection survives a blocked response; the upstream does
	// not, so the next request needs a new one.
	resp, body := get(t, c, "/type/text/plain")
	if resp.StatusCode != 200 || len(body) != 100<<10 {
		t.Fatalf("GET after blocked responses: %s, %d bytes", resp.Status, len(body))
	}
	if got := o.conns.Load(); got != 4 {
		t.Errorf("origin connections = %d, want 4 (each blocked response closes the upstream)", got)
	}
}

// TestFlowsShowCopy checks that /flows reports why a filter pair is never spliced.
func TestFlowsShowCopy(t *testing.T) {
	_, f := startFilter(t)
	c := dialFilter(t, f)
	_, n := getOn(t, c, "/obj/10")
	// Bytes are counted once each write returned, which may be just after
	// the client read them: poll.
	var fl []forwarder.Flow
	for deadline := time.Now().Add(waitFor); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if fl = f.Flows().Snapshot(); len(fl) == 1 && fl[0].BytesDown >= n && fl[0].BytesUp > 0 {
			break
		}
	}
	if len(fl) != 1 || fl[0].Engine != "copy" || fl[0].Note != filter.NoSpliceReason || fl[0].State != "control" {
		t.Fatalf("/flows = %+v, want one pair in control mode with engine copy and note %q", fl, filter.NoSpliceReason)
	}
	if fl[0].BytesUp == 0 || fl[0].BytesDown < n {
		t.Errorf("/flows counts %d bytes up, %d down; the filter forwarded a request and a %d-byte body", fl[0].BytesUp, fl[0].BytesDown, n)
	}
}

// TestBadRequests sends each bad request to an origin that would take it
// (a lenient one, with no parser to refuse anything), so the answer and
// no byte at the origin are the filter's doing.
func TestBadRequests(t *testing.T) {
	o := proxytest.NewLenientOrigin(t)
	lc := filterListener(o.Addr)
	lc.HTTP = &config.HTTP{HeaderTimeout: config.Duration(300 * time.Millisecond), MaxHeaderBytes: 4096, MaxHeaders: 10}
	f := fwdtest.Start(t, lc)
	addr := f.Addr("filter").String()
	many := strings.Repeat("X-A: b\r\n", 11)
	for _, c := range []struct {
		name, send string
		status     int
	}{
		{"not HTTP", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"Content-Length and Transfer-Encoding", "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"two Content-Lengths", "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", 431},
		{"too many headers", "GET / HTTP/1.1\r\nHost: x\r\n" + many + "\r\n", 431},
		{"slow head", "GET / HTTP/1.1\r\nHost: x\r\n", 408},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := o.Refused(t, addr, c.send)
			if resp.StatusCode != c.status || !resp.Close {
				t.Fatalf("response %s (close %v); want %d and close", resp.Status, resp.Close, c.status)
			}
		})
	}
	// A good request still works after all that.
	if resp, _ := get(t, client(t, f), "/obj/10"); resp.StatusCode != 200 || o.Requests() != 1 {
		t.Errorf("after bad requests: %s, %d requests at the origin, want 200 and 1", resp.Status, o.Requests())
	}
}

func TestUpstreamDown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ln.Close()
	f := fwdtest.Start(t, filterListener(ln.Addr().String()))
	if resp, _ := get(t, client(t, f), "/"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("with the upstream down: %s, want 502", resp.Status)
	}
}

func TestProxyProtocol(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		t.Run(v, func(t *testing.T) {
			o := startOrigin(t, true)
			lc := filterListener(o.addr)
			lc.ProxyProtocol = v
			f := fwdtest.Start(t, lc)
			conn := dialFilter(t, f)
			fmt.Fprintf(conn, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if string(body) != "origin /hello" {
				t.Fatalf("body %q", body)
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			want := proxyproto.Info{Version: int(v[1] - '0'), Source: conn.LocalAddr().(*net.TCPAddr).AddrPort(),
				Destination: conn.RemoteAddr().(*net.TCPAddr).AddrPort()}
			if len(o.headers) != 1 || o.headers[0] != want {
				t.Errorf("origin got headers %+v, want [%+v]", o.headers, want)
			}
		})
	}
}

// startFilter starts an origin and a filter listener in front of it.
func startFilter(tb testing.TB) (*origin, *forwarder.Forwarder) {
	tb.Helper()
	o := startOrigin(tb, false)
	return o, fwdtest.Start(tb, filterListener(o.addr))
}

// getOn sends a GET for path on c and reads the response's body; it
// returns the reader of c, for what c brings next, and the body's length.
func getOn(tb testing.TB, c net.Conn, path string) (*bufio.Reader, int64) {
	tb.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: body: %v", path, err)
	}
	return r, n
}

// dialFilter connects to f's listener "filter"; the connection gives up
// after waitFor and is closed when the test ends.
func dialFilter(tb testing.TB, f *forwarder.Forwarder) net.Conn {
	tb.Helper()
	return fwdtest.DialFor(tb, f.Addr("filter").String(), waitFor)
}

// exchangeRaw sends req on a new connection to the filter and returns all
// it reads until the filter closes.
func exchangeRaw(tb testing.TB, f *forwarder.Forwarder, req string) string {
	tb.Helper()
	c := dialFilter(tb, f)
	io.WriteString(c, req)
	b, err := io.ReadAll(c)
	if err != nil {
		tb.Fatalf("read: %v after %q", err, b)
	}
	return string(b)
}

func TestCloseDelimitedAndTrailers(t *testing.T) {
	const chunkedWithTrailer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Sum: 42\r\n\r\n"
	const closeDelimited = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the upstream closes"
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		if req.URL.Path == "/trailer" {
			io.WriteString(c, chunkedWithTrailer)
			return
		}
		io.WriteString(c, closeDelimited)
	})
	f := fwdtest.Start(t, filterListener(up))
	if got := exchangeRaw(t, f, "GET /trailer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); got != chunkedWithTrailer {
		t.Errorf("chunked with trailer arrived as %q, want it byte for byte", got)
	}
	if got := exchangeRaw(t, f, "GET /eof HTTP/1.1\r\nHost: x\r\n\r\n"); got != closeDelimited {
		t.Errorf("close-delimited response arrived as %q", got)
	}
}

func TestExpectContinue(t *testing.T) {
	_, f := startFilter(t)
	c := dialFilter(t, f)
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	r := bufio.NewReader(c)
	// The body is sent only after the interim response, as a client would.
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("first response line %q, %v; want 100 Continue", line, err)
	}
	r.ReadString('\n') // the empty line ending the interim response
	io.WriteString(c, "hello")
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprintf("5 %x", sha256.Sum256([]byte("hello"))); string(body) != want {
		t.Errorf("origin saw %q, want %q", body, want)
	}
}

func TestSwitchingProtocols(t *testing.T) {
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := http.ReadRequest(r); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(c, r)
	})
	f := fwdtest.Start(t, filterListener(up))
	c := dialFilter(t, f)
	// The first echoed bytes ride along with the request, as clients that
	// speak first after an upgrade do.
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nping ")
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("response %v, %v; want 101", resp, err)
	}
	io.WriteString(c, "pong")
	got := make([]byte, len("ping pong"))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "ping pong" {
		t.Fatalf("after the upgrade: %q, %v", got, err)
	}
}

// TestShutdownClosesIdleKeepAlive checks that a graceful shutdown does not
// wait out its grace period for a client idle between requests.
func TestShutdownClosesIdleKeepAlive(t *testing.T) {
	_, f := startFilter(t)
	c := dialFilter(t, f)
	r, _ := getOn(t, c, "/obj/10")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (the idle keep-alive pair held it)", err)
	}
	if n, err := r.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("idle keep-alive connection still open after shutdown (read %d, %v)", n, err)
	}
}

// TestStaleUpstreamRetried: an upstream that closes its keep-alive
// connection after a response (its idle timeout, say) must not cost the
// client's next request a 502.
func TestStaleUpstreamRetried(t *testing.T) {
	var accepted atomic.Int64
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		accepted.Add(1)
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
	})
	f := fwdtest.Start(t, filterListener(up))
	c := client(t, f)
	for _, path := range []string{"/one", "/two", "/three"} {
		if resp, body := get(t, c, path); resp.StatusCode != 200 || string(body) != path {
			t.Fatalf("GET %s: %s %q", path, resp.Status, body)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("upstream connections = %d, want 3 (one per request, each after the last closed)", n)
	}
}

// TestH2CUpgradeStripped: an upstream that switches to HTTP/2 whenever a
// request offers h2c never sees the offer through the filter, so the
// exchange stays HTTP/1.1, where the filter can read it.
func TestH2CUpgradeStripped(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		seen <- req.Header
		if strings.Contains(strings.ToLower(req.Header.Get("Upgrade")), "h2c") {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	f := fwdtest.Start(t, filterListener(up))
	got := exchangeRaw(t, f, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"+
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK") {
		t.Fatalf("h2c offer through the filter: got %q, want a plain 200", got)
	}
	h := <-seen
	if h.Get("Upgrade") != "" || h.Get("HTTP2-Settings") != "" || strings.Contains(h.Get("Connection"), "Upgrade") {
		t.Errorf("upstream saw the h2c offer: %v", h)
	}
	if !strings.Contains(h.Get("Connection"), "close") {
		t.Errorf("Connection lost its other tokens: %q", h.Get("Connection"))
	}
}

// TestUnrequestedSwitchRefused: a 101 to a protocol the client did not ask
// for is not tunnelled.
func TestUnrequestedSwitchRefused(t *testing.T) {
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := http.ReadRequest(r); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	})
	f := fwdtest.Start(t, filterListener(up))
	for _, req := range []string{
		"GET /x HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	} {
		if got := exchangeRaw(t, f, req); !strings.HasPrefix(got, "HTTP/1.1 502") {
			t.Errorf("unrequested 101 for %q: got %q, want 502", req, got)
		}
	}
}

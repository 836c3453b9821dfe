// Lab tests of http-reverse: per-request routing on one keep-alive connection with bodies spliced, health checks, forwarding headers.

package httprev_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

// Ports: the proxy listener, and the back-ends on the server host.
const (
	proxyPort = 8090
	shopPort  = 8080 // examples/http-reverse.yaml's listener
	portA     = 8001 // the example's back-ends
	portB     = 8002
	portSick  = 8003 // serves objects but fails its health check
	portEcho  = 8004 // answers with the forwarding headers it got
	portDead  = 8009 // nothing listens
)

type revLab struct {
	*httplab.Forwarder
	addr string
}

func TestLabHTTPReverse(t *testing.T) {
	l := httplab.New(t)
	httplab.ServeOrigin(t, l, httplab.ServerAddr(l, portA), origin.WithName("a"))
	httplab.ServeOrigin(t, l, httplab.ServerAddr(l, portB), origin.WithName("b"))
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, portSick), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Origin-Name", "sick")
		if r.URL.Path == "/health" {
			http.Error(w, "not well", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "sick answers anyway\n")
	}))
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, portEcho), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%d %x\n", len(body), sha256.Sum256(body))
			return
		}
		fmt.Fprintf(w, "Forwarded: %s\nX-Forwarded-For: %s\n", r.Header.Get("Forwarded"), r.Header.Get("X-Forwarded-For"))
	}))

	check := &config.HealthCheck{Path: "/health", Interval: config.Duration(100 * time.Millisecond), Timeout: config.Duration(100 * time.Millisecond)}
	lc := httplab.Listener("rev", httplab.FwdAddr(l, proxyPort), "http-reverse")
	lc.Routes = []config.Route{
		{PathPrefix: "/echo", Pool: "echo"},
		{Host: "health.test", Pool: "checked"},
		{Host: "dead.test", Pool: "dead"},
		{Pool: "ab"},
	}
	lc.Pools = []config.Pool{
		{Name: "ab", Balance: "round_robin", Servers: config.Servers(httplab.ServerAddr(l, portA), httplab.ServerAddr(l, portB))},
		{Name: "checked", Servers: config.Servers(httplab.ServerAddr(l, portSick), httplab.ServerAddr(l, portDead), httplab.ServerAddr(l, portA)), HealthCheck: check},
		{Name: "dead", Servers: config.Servers(httplab.ServerAddr(l, portDead)), HealthCheck: check},
		{Name: "echo", Servers: config.Servers(httplab.ServerAddr(l, portEcho))},
	}
	shop := httplab.ExampleListener(t, "../../examples/http-reverse.yaml", "shop")
	rl := &revLab{Forwarder: httplab.Start(t, l, lc, shop), addr: httplab.FwdAddr(l, proxyPort)}

	t.Run("keep-alive-alternates", rl.testAlternates)
	t.Run("curl-keep-alive", rl.testCurlKeepAlive)
	t.Run("forwarded", rl.testForwarded)
	t.Run("post", rl.testPost)
	t.Run("pipelined", rl.testPipelined)
	t.Run("http-1.0", rl.testHTTP10)
	t.Run("health-check", rl.testHealthCheck)
}

// readObject reads the next response on br and fails the test unless its
// body is the origin's object of size bytes.
func readObject(tb testing.TB, br *bufio.Reader, size int64) *http.Response {
	tb.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Fatalf("response to /obj/%d: %v", size, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || sha256.Sum256(body) != origin.ObjectSHA256(size) {
		tb.Fatalf("/obj/%d: %d bytes, %v, or wrong content", size, len(body), err)
	}
	return resp
}

// testAlternates sends requests on one client connection; round robin
// sends them to a and b in turn, each response body is spliced (each is
// longer than http-reverse copies itself, httpcore.ReverseCopyBelow), and
// the proxy regains control for the next request.
func (rl *revLab) testAlternates(t *testing.T) {
	c := httplab.Dial(t, rl.Lab, rl.addr)
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	br := bufio.NewReader(c)
	before := rl.Spliced("limit")
	sizes := []int64{600 << 10, 1 << 20, 700 << 10, 2 << 20}
	var names []string
	for _, size := range sizes {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(size))
		resp := readObject(t, br, size)
		names = append(names, resp.Header.Get("X-Origin-Name"))
	}
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] || (names[i] != "a" && names[i] != "b") {
			t.Fatalf("back-ends in order %v, want a and b in turn", names)
		}
	}
	// The last body's splice is counted when it returns, which may be
	// after the client has the body (the unsplice outlives its last byte).
	testenv.Eventually(t, "every body's splice to return", func() bool { return rl.Spliced("limit")-before >= float64(len(sizes)) })
	if got := rl.Spliced("limit") - before; got != float64(len(sizes)) {
		t.Errorf("%v response bodies spliced, want %d", got, len(sizes))
	}
	if got := rl.Metric("splicer_connections_accepted_total", "listener", "rev"); got != 1 {
		t.Errorf("%v client connections, want 1", got)
	}
}

// testCurlKeepAlive does the same with curl, which reuses its connection
// for the URLs of one command line, through the example's listener.
func (rl *revLab) testCurlKeepAlive(t *testing.T) {
	url := "http://" + httplab.FwdAddr(rl.Lab, shopPort) + origin.ObjectPath(100<<10)
	out, err := httplab.Curl(t, rl.Lab, "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
		"-w", `%header{x-origin-name} %{size_download} %{num_connects}\n`, url, url, url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("curl wrote %q", out)
	}
	connects := 0
	for i, line := range lines {
		var name string
		var size, n int
		fmt.Sscan(line, &name, &size, &n)
		connects += n
		if size != 100<<10 || (i > 0 && strings.HasPrefix(lines[i-1], name+" ")) {
			t.Errorf("curl results %q: want 102400 bytes each from a and b in turn", lines)
		}
	}
	if connects != 1 {
		t.Errorf("curl connected %d times, want once", connects)
	}
}

// testForwarded checks the back-end learns the client's address.
func (rl *revLab) testForwarded(t *testing.T) {
	out, err := httplab.Curl(t, rl.Lab, "http://"+rl.addr+"/echo")
	if err != nil {
		t.Fatal(err)
	}
	ip := httplab.ClientIP(rl.Lab)
	want := fmt.Sprintf("Forwarded: for=%s;proto=http;host=\"%s\"\nX-Forwarded-For: %s\n", ip, rl.addr, ip)
	if string(out) != want {
		t.Errorf("back-end saw\n%s\nwant\n%s", out, want)
	}
}

// testPost sends request bodies, one with a length (spliced up) and one
// chunked (streamed), on one connection.
func (rl *revLab) testPost(t *testing.T) {
	body := bytes.Repeat([]byte("posted bytes "), 100_000)
	want := fmt.Sprintf("%d %x\n", len(body), sha256.Sum256(body))
	before := rl.Spliced("limit")
	c := httplab.Dial(t, rl.Lab, rl.addr)
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	br := bufio.NewReader(c)
	for _, chunked := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+rl.addr+"/echo", bytes.NewReader(body))
		if chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(bytes.NewReader(body)) // unknown length: sent chunked
		}
		if err := req.Write(c); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("chunked %v: %v", chunked, err)
		}
		got, _ := io.ReadAll(resp.Body)
		if string(got) != want {
			t.Errorf("chunked %v: back-end got %q, want %q", chunked, got, want)
		}
	}
	if got := rl.Spliced("limit") - before; got != 1 {
		t.Errorf("%v splices ended at their limit, want 1 (the request body with a length)", got)
	}
}

// testPipelined sends three requests in one write: while a response body
// is spliced the next requests wait in the client socket, and each is
// answered in order.
func (rl *revLab) testPipelined(t *testing.T) {
	c := httplab.Dial(t, rl.Lab, rl.addr)
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	sizes := []int64{200 << 10, 10, 500 << 10}
	var reqs bytes.Buffer
	for _, size := range sizes {
		fmt.Fprintf(&reqs, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(size))
	}
	if _, err := c.Write(reqs.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for _, size := range sizes {
		readObject(t, br, size)
	}
}

// testHTTP10 checks an HTTP/1.0 request without keep-alive is answered and
// the connection closed after the body.
func (rl *revLab) testHTTP10(t *testing.T) {
	c := httplab.Dial(t, rl.Lab, rl.addr)
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(100<<10))
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read to close: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(all)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if sha256.Sum256(body) != origin.ObjectSHA256(100<<10) || !resp.Close {
		t.Errorf("got %d bytes, Connection: %q; want the object and close", len(body), resp.Header.Get("Connection"))
	}
}

// testHealthCheck checks that servers failing their health check (one
// answering 503, one not listening) are skipped, and that a pool with no
// healthy server answers 503.
func (rl *revLab) testHealthCheck(t *testing.T) {
	testenv.Eventually(t, "the health checks to mark the sick and dead servers down", func() bool {
		return rl.Logs.Contains("server="+httplab.ServerAddr(rl.Lab, portSick)) &&
			strings.Count(rl.Logs.String(), "server failed its health check") >= 3
	})
	for range 4 {
		out, err := httplab.Curl(t, rl.Lab, "-D", "-", "-H", "Host: health.test", "http://"+rl.addr+origin.ObjectPath(10))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out, []byte("X-Origin-Name: a\r\n")) {
			t.Fatalf("answered by a server that failed its health check:\n%s", out)
		}
	}
	out, _ := httplab.Curl(t, rl.Lab, "-D", "-", "-H", "Host: dead.test", "http://"+rl.addr+"/")
	if !bytes.HasPrefix(out, []byte("HTTP/1.1 503 ")) {
		t.Errorf("pool without a healthy server answered\n%s\nwant 503", out)
	}
}

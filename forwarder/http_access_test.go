// HTTP kinds report each answered request: an access log line of its own (method, host, path, status, bytes), splicer_http_responses_total by status class and splicer_http_response_bytes_total by the way the bytes moved.

package forwarder_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/accesslog"
	"github.com/splicer/splicer/internal/testenv"
)

// loggedReverse starts an http-reverse listener "rev" in front of up
// that writes its json access log to the returned buffer.
func loggedReverse(tb testing.TB, up string) (*forwarder.Forwarder, *testenv.Buffer) {
	tb.Helper()
	buf := &testenv.Buffer{}
	a, err := accesslog.New(buf, accesslog.JSON)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := fwdtest.Config(tb, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, up)
	return fwdtest.StartWith(tb, forwarder.Options{AccessLog: a}, cfg.Listeners...), buf
}

// requestLines waits for buf to hold n request lines and returns them,
// each decoded.
func requestLines(tb testing.TB, buf *testenv.Buffer, n int) []map[string]any {
	tb.Helper()
	var lines []map[string]any
	testenv.Eventually(tb, fmt.Sprintf("%d request lines", n), func() bool {
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["type"] == "request" {
				lines = append(lines, m)
			}
		}
		return len(lines) == n
	})
	return lines
}

func TestHTTPRequestsLoggedAndCounted(t *testing.T) {
	f, buf := loggedReverse(t, fwdtest.HTTPOrigin(t))
	c := fwdtest.DialFor(t, f.Addr("rev").String(), 5*time.Second)
	r := bufio.NewReader(c)
	const big = 1 << 20 // spliced by the listener's engine (auto: pipe here)
	for _, path := range []string{"/obj/1000", "/obj/10", "/nothing-here", fmt.Sprintf("/obj/%d", big)} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", path)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a b\r\n\r\n") // refused: 400
	io.ReadAll(r)

	lines := requestLines(t, buf, 5)
	first := lines[0]
	for k, v := range map[string]any{"method": "GET", "host": "app.example", "path": "/obj/1000", "status": float64(200), "listener": "rev"} {
		if first[k] != v {
			t.Errorf("first request line %s = %v, want %v (%v)", k, first[k], v, first)
		}
	}
	if b, _ := first["bytes_down"].(float64); b < 1000 || b > 1500 {
		t.Errorf("first request bytes_down %v, want the 1000-byte body and its head", first["bytes_down"])
	}
	if lines[2]["status"] != float64(404) || lines[4]["status"] != float64(400) {
		t.Errorf("statuses %v %v, want 404 and 400", lines[2]["status"], lines[4]["status"])
	}
	for code, want := range map[string]float64{"2xx": 3, "4xx": 2} {
		if n := fwdtest.Metric(f, "splicer_http_responses_total", "listener", "rev", "code", code); n != want {
			t.Errorf("splicer_http_responses_total{code=%q} = %v, want %v", code, n, want)
		}
	}
	if b, _ := lines[4]["bytes_down"].(float64); b > 1000 {
		t.Errorf("the refused request's line counts %v bytes, want its 400 alone (the answer before it not again)", b)
	}
	checkResponseWays(t, f, lines, big)
}

// checkResponseWays checks splicer_http_response_bytes_total against the
// access log: every byte the lines count, in one way or another, and the
// body of big bytes spliced, but for what came with its head.
func checkResponseWays(tb testing.TB, f *forwarder.Forwarder, lines []map[string]any, big float64) {
	tb.Helper()
	var logged float64
	for _, l := range lines {
		b, _ := l["bytes_down"].(float64)
		logged += b
	}
	ways := map[string]float64{}
	var counted float64
	for _, w := range []string{"copied", "kernel", "spliced"} {
		ways[w] = fwdtest.Metric(f, "splicer_http_response_bytes_total", "listener", "rev", "way", w)
		counted += ways[w]
	}
	if counted != logged {
		tb.Errorf("splicer_http_response_bytes_total %v in all (%v), want the %v bytes the access log counts", counted, ways, logged)
	}
	if ways["spliced"] < big-16<<10 || ways["spliced"] > big {
		tb.Errorf("spliced %v bytes, want the %v-byte body but for its first read (16 KiB at most)", ways["spliced"], big)
	}
}

// requestIDEcho is a back end that answers each request with the
// X-Request-ID values it received, joined by ",".
func requestIDEcho(tb testing.TB) string {
	tb.Helper()
	return fwdtest.ReadingBackend(tb, func(c net.Conn, r *bufio.Reader) {
		testenv.EachRequest(r, func(req *http.Request, _ []byte) bool {
			body := strings.Join(req.Header.Values("X-Request-Id"), ",")
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return true
		})
	})
}

// TestRequestIDPassedOnAndLogged: http-reverse passes a client's sane
// X-Request-ID on, replaces one that is not (a space, too long, two of
// them) and adds one where there is none, a new one each request; the
// json access log names the ID the back end saw, and the request's user
// agent, referer, target with its query, protocol and bytes each way.
func TestRequestIDPassedOnAndLogged(t *testing.T) {
	f, buf := loggedReverse(t, requestIDEcho(t))
	c := fwdtest.DialFor(t, f.Addr("rev").String(), 5*time.Second)
	r := bufio.NewReader(c)
	sent := []string{
		"X-Request-ID: client-id-42\r\nUser-Agent: ua/1.0\r\nReferer: http://r.example/x\r\n",
		"", "",
		"X-Request-ID: two words\r\n",
		"X-Request-ID: " + strings.Repeat("a", 129) + "\r\n",
		"X-Request-ID: one\r\nX-Request-ID: other\r\n",
	}
	var seen []string
	for i, extra := range sent {
		fmt.Fprintf(c, "GET /obj/10?n=%d HTTP/1.1\r\nHost: app.example\r\n%s\r\n", i, extra)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		seen = append(seen, string(b))
	}
	if seen[0] != "client-id-42" {
		t.Errorf("back end saw X-Request-ID %q, want the client's client-id-42", seen[0])
	}
	made := map[string]bool{}
	for i, id := range seen[1:] {
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || made[id] {
			t.Errorf("request %d (%q): back end saw X-Request-ID %q, want a new 32-hex-digit one", i+1, sent[i+1], id)
		}
		made[id] = true
	}

	lines := requestLines(t, buf, len(sent))
	for i, l := range lines {
		if l["request_id"] != seen[i] {
			t.Errorf("request %d logged request_id %v, want %q, what the back end saw", i, l["request_id"], seen[i])
		}
	}
	for k, v := range map[string]any{"path": "/obj/10?n=0", "protocol": "HTTP/1.1", "user_agent": "ua/1.0",
		"referer": "http://r.example/x", "method": "GET", "host": "app.example", "proxy": "http-reverse"} {
		if lines[0][k] != v {
			t.Errorf("first request %s = %v, want %v", k, lines[0][k], v)
		}
	}
	// Its head as sent upstream: the client's 124 bytes and the
	// forwarding fields.
	if b, _ := lines[0]["bytes_up"].(float64); b < 124 || b > 400 {
		t.Errorf("first request bytes_up %v, want its head's length as sent upstream", lines[0]["bytes_up"])
	}
}

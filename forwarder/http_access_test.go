// HTTP kinds report each answered request: an access log line of its own (method, host, path, status, bytes) and splicer_http_responses_total by status class.

package forwarder_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

func TestHTTPRequestsLoggedAndCounted(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, up)))
	if err != nil {
		t.Fatal(err)
	}
	buf := &testenv.Buffer{}
	f, err := forwarder.New(cfg, forwarder.Options{AccessLog: slog.New(slog.NewJSONHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Shutdown(canceledCtx()) })

	c, err := net.Dial("tcp", f.Addr("rev").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for _, path := range []string{"/obj/1000", "/obj/10", "/nothing-here"} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", path)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a b\r\n\r\n") // refused: 400
	io.ReadAll(r)

	var lines []map[string]any
	testenv.Eventually(t, "four request lines", func() bool {
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" {
				lines = append(lines, m)
			}
		}
		return len(lines) == 4
	})
	first := lines[0]
	for k, v := range map[string]any{"method": "GET", "host": "app.example", "path": "/obj/1000", "status": float64(200), "listener": "rev"} {
		if first[k] != v {
			t.Errorf("first request line %s = %v, want %v (%v)", k, first[k], v, first)
		}
	}
	if b, _ := first["bytes"].(float64); b < 1000 || b > 1500 {
		t.Errorf("first request bytes %v, want the 1000-byte body and its head", first["bytes"])
	}
	if lines[2]["status"] != float64(404) || lines[3]["status"] != float64(400) {
		t.Errorf("statuses %v %v, want 404 and 400", lines[2]["status"], lines[3]["status"])
	}
	for code, want := range map[string]float64{"2xx": 2, "4xx": 2} {
		if n := counterValue(t, f, "splicer_http_responses_total", map[string]string{"listener": "rev", "code": code}); n != want {
			t.Errorf("splicer_http_responses_total{code=%q} = %v, want %v", code, n, want)
		}
	}
}

// counterValue reads one counter series of f's registry.
func counterValue(tb testing.TB, f *forwarder.Forwarder, name string, labels map[string]string) float64 {
	tb.Helper()
	families, err := f.Metrics().Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsEqual(m.GetLabel(), labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Each HTTP listener times the requests it answers: splicer_http_request_duration_seconds has a series per listener, counting its requests.

package forwarder_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// getN sends n GETs on one connection to addr and reads the answers.
func getN(tb testing.TB, addr string, n int) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for range n {
		fmt.Fprintf(c, "GET /obj/100 HTTP/1.1\r\nHost: app.example\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			tb.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func TestHTTPRequestDurationPerListener(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: a, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: b, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
`, up)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := forwarder.New(cfg, forwarder.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Shutdown(canceledCtx()) })

	getN(t, f.Addr("a").String(), 3)
	getN(t, f.Addr("b").String(), 1)

	var counts map[string]uint64
	// A request is recorded when its answer has been sent, which may be
	// just after the client read it.
	testenv.Eventually(t, "request durations observed for a (3) and b (1)", func() bool {
		counts = requestCounts(t, f)
		return counts["a"] == 3 && counts["b"] == 1
	})
	if len(counts) != 2 {
		t.Errorf("splicer_http_request_duration_seconds counts by listener %v, want a and b only", counts)
	}
}

// requestCounts is splicer_http_request_duration_seconds's sample count by
// listener.
func requestCounts(tb testing.TB, f *forwarder.Forwarder) map[string]uint64 {
	tb.Helper()
	mfs, err := f.Metrics().Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "splicer_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "listener" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return counts
}

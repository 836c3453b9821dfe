// Per-listener metrics: each HTTP listener times the requests it answers (splicer_http_request_duration_seconds), and each listener with max_connections exports it (splicer_connections_limit).

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
	f := fwdtest.StartConfig(t, cfg, forwarder.Options{})

	getN(t, f.Addr("a").String(), 3)
	getN(t, f.Addr("b").String(), 1)

	count := func(listener string) float64 {
		return fwdtest.Metric(f, "splicer_http_request_duration_seconds", "listener", listener)
	}
	// A request is recorded when its answer has been sent, which may be
	// just after the client read it.
	testenv.Eventually(t, "request durations observed for a (3) and b (1)", func() bool {
		return count("a") == 3 && count("b") == 1
	})
}

func TestConnectionsLimitExported(t *testing.T) {
	up := fwdtest.Echo(t)
	capped := tcpListener("capped", "127.0.0.1:0", up)
	capped.MaxConnections = 5
	open := tcpListener("open", "127.0.0.1:0", up)
	open.MaxConnections = 0
	f := fwdtest.Start(t, capped, open)
	if v := fwdtest.Metric(f, "splicer_connections_limit", "listener", "capped"); v != 5 {
		t.Errorf("splicer_connections_limit{listener=capped} = %v, want its max_connections 5", v)
	}
	if v := fwdtest.Metric(f, "splicer_connections_limit", "listener", "open"); v != 0 {
		t.Errorf("splicer_connections_limit{listener=open} = %v, want no series without max_connections", v)
	}
}

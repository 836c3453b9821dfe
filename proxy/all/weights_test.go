// Tests that http-reverse shares requests among a pool's servers by their weights.

package all_test

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

// TestPoolServersShareRequestsByWeight: 40 requests on one keep-alive
// connection through a pool of three servers, weights 3, 1 and 0 (one
// being drained), reach them 30, 10 and 0 times, as round robin by weight
// gives exactly.
func TestPoolServersShareRequestsByWeight(t *testing.T) {
	var served [3]atomic.Int64
	var addrs [3]string
	for i := range addrs {
		addrs[i] = httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
			served[i].Add(1)
			fmt.Fprint(w, i)
		})
	}
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - name: rev
    listen: '127.0.0.1:0'
    proxy: http-reverse
    routes: [{pool: p}]
    pools:
      - name: p
        servers: [{address: '%s', weight: 3}, '%s', {address: '%s', weight: 0}]
`, addrs[0], addrs[1], addrs[2])))
	if err != nil {
		t.Fatal(err)
	}
	f := fwdtest.Start(t, cfg.Listeners...)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	for i := range 40 {
		resp, err := client.Get("http://" + f.Addr("rev").String() + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if a, b, c := served[0].Load(), served[1].Load(), served[2].Load(); a != 30 || b != 10 || c != 0 {
		t.Errorf("the servers of weight 3, 1 and 0 served %d, %d and %d of 40 requests, want 30, 10 and 0", a, b, c)
	}
}

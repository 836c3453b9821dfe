// A request body trickled just within body_timeout is still bounded: http.body_min_rate gives it 408 once it falls behind, through http-forward and http-reverse.

package all_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

// TestTrickledRequestBodiesGet408: a client that sends its request body a
// byte every 300 ms never waits body_timeout (1 s) for one, but falls
// behind body_min_rate (64 KiB/s after a grace of body_timeout): it gets
// 408 within seconds, whether the body is copied, chunked or spliced,
// and the back end never gets a whole request.
func TestTrickledRequestBodiesGet408(t *testing.T) {
	o := fwdtest.NewRecordingOrigin(t)
	var listeners []config.Listener
	for _, l := range fwdtest.HTTPListeners(t, o.Addr) {
		if l.Proxy == "filter" {
			continue // the filter relays bodies its own way
		}
		l.HTTP = &config.HTTP{BodyTimeout: config.Duration(time.Second), BodyMinRate: 64 << 10}
		listeners = append(listeners, l)
	}
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]struct{ head, first, trickle string }{
		"copied":  {"Content-Length: 40\r\n", "", strings.Repeat("x", 40)},
		"chunked": {"Transfer-Encoding: chunked\r\n", "", strings.Repeat("1\r\nx\r\n", 10) + "0\r\n\r\n"},
		// Past what the proxies copy themselves: the engine splices it.
		"spliced": {"Content-Length: 1048576\r\n", strings.Repeat("x", 64<<10), strings.Repeat("x", 1<<20-64<<10)},
	}
	for _, l := range listeners {
		for name, b := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				t.Parallel()
				c := fwdtest.DialFor(t, f.Addr(l.Name).String(), 15*time.Second)
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", fwdtest.RequestTarget(l, o.Addr, "/"+name), o.Addr, b.head)
				if _, err := c.Write([]byte(head + b.first)); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				go trickle(c, b.trickle, 300*time.Millisecond)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer after %v: %v", time.Since(start), err)
				}
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("%s after %v, want 408", resp.Status, time.Since(start))
				}
				for _, req := range o.Requests() {
					if req.URL.Path == "/"+name {
						t.Errorf("the back end received the whole trickled %s body", name)
					}
				}
			})
		}
	}
}

// trickle writes s to c a byte every interval until it is written or c fails.
func trickle(c net.Conn, s string, interval time.Duration) {
	for i := range len(s) {
		time.Sleep(interval)
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}

// Tests that a keep-alive connection waits for its next request up to http.keepalive_timeout, through every HTTP kind.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

// TestKeepaliveTimeoutClosesIdleConnections: a kept connection whose
// client sends nothing more is closed once http.keepalive_timeout passes
// after its last response, by every HTTP kind, though idle_timeout is an
// hour; one whose client comes back sooner is served, as often as it
// does. The close is a FIN (no answer: nobody asked), counted eof.
func TestKeepaliveTimeoutClosesIdleConnections(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	const keepalive = 500 * time.Millisecond
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{KeepaliveTimeout: config.Duration(keepalive)}
	}
	f := fwdtest.Start(t, listeners...)
	t.Run("kinds", func(t *testing.T) {
		for _, l := range listeners {
			keptUntilTheBound(t, l.Name, f.Addr(l.Name).String(), fwdtest.RequestTarget(l, up, "/obj/1KiB"), up, keepalive)
		}
	})
	for _, l := range listeners {
		fwdtest.WaitMetric(t, f, 1, "splicer_connections_closed_total", "listener", l.Name, "reason", "eof")
	}
}

// keptUntilTheBound runs, in parallel, a client of listener name at addr
// that asks for target five times, keepalive/2 apart, and then waits for
// the proxy to close the connection, between keepalive and half as long
// again later.
func keptUntilTheBound(t *testing.T, name, addr, target, host string, keepalive time.Duration) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		r := bufio.NewReader(c)
		get := func(i int) {
			t.Helper()
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, host)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || len(body) != 1024 {
				t.Fatalf("request %d: %s, %d body bytes, %v", i, resp.Status, len(body), err)
			}
		}
		for i := range 4 { // back before the bound each time: served
			get(i)
			time.Sleep(keepalive / 2)
		}
		get(4)
		last := time.Now()
		n, err := r.Read(make([]byte, 1))
		took := time.Since(last)
		if n != 0 || err != io.EOF {
			t.Fatalf("idle connection read %d bytes, %v: want the proxy's FIN", n, err)
		}
		if took < keepalive || took > keepalive+keepalive/2 {
			t.Errorf("idle connection closed %v after its last response, want %v to %v", took, keepalive, keepalive+keepalive/2)
		}
	})
}

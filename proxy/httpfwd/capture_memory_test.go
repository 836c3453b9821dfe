// Bodies being captured for the cache count against its bound: clients asking through http-forward for bodies an origin declares long and never sends do not make the proxy hold more than the cache's bound, however many they are.

package httpfwd_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// stallingOrigin answers every request with a cacheable head declaring a
// body of length bytes, sends none of it and holds the connection until
// the returned stop is called.
func stallingOrigin(tb testing.TB, length int64) (addr string, stop func()) {
	tb.Helper()
	ln := testenv.ListenLoopback(tb)
	stop = testenv.HoldEach(tb, ln, func(c net.Conn) {
		go func() {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nCache-Control: max-age=600\r\n\r\n", length)
			}
		}()
	})
	return ln.Addr().String(), stop
}

// heapInuse is the heap in use after a collection.
func heapInuse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

func TestStalledCapturesStayWithinTheCacheBound(t *testing.T) {
	const cacheBytes = 80 << 20 // an eighth, 10 MiB, takes the declared length
	grown := stalledCapturesHeap(t, cacheBytes)
	if grown > cacheBytes+16<<20 {
		t.Errorf("heap grew %d MiB for stalled captures, past the cache's bound of %d MiB", grown>>20, cacheBytes>>20)
	}
}

// TestStalledCapturesHoldWhatArrived: with a bound every capture fits in,
// a capture holds what the origin sent, not what its Content-Length claims.
func TestStalledCapturesHoldWhatArrived(t *testing.T) {
	grown := stalledCapturesHeap(t, 1<<30)
	if grown > 8<<20 {
		t.Errorf("heap grew %d MiB for stalled captures that received no body byte", grown>>20)
	}
}

// stalledCapturesHeap sends 24 requests through an http-forward listener
// of the given cache bound to an origin that declares 10 MB bodies and
// sends none, and returns how much the heap grew while they wait.
func stalledCapturesHeap(tb testing.TB, cacheBytes int64) int64 {
	tb.Helper()
	const (
		declared = 10_000_000
		requests = 24
	)
	up, stop := stallingOrigin(tb, declared)
	cfg, err := config.Parse("test.yaml", fmt.Appendf(nil, `
listeners:
  - {name: fwd, listen: '127.0.0.1:0', proxy: http-forward, http: {cache_bytes: %d}, destinations: {allow: ['%s']}}
`, cacheBytes, up))
	if err != nil {
		tb.Fatal(err)
	}
	f := fwdtest.Start(tb, cfg.Listeners...)
	tb.Cleanup(stop) // before the forwarder's shutdown: the captures end at once
	before := heapInuse()
	for i := range requests {
		c, err := net.Dial("tcp", f.Addr("fwd").String())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/obj/%d HTTP/1.1\r\nHost: %[1]s\r\n\r\n", up, i)
		// The proxy relays the head, then captures the body.
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			tb.Fatalf("request %d: %v", i, err)
		}
	}
	// The heads left before the captures began: the heap is read a few
	// times while they start.
	var grown int64
	for range 5 {
		time.Sleep(50 * time.Millisecond)
		grown = max(grown, heapInuse()-before)
	}
	tb.Logf("heap grew %d MiB for %d captures of %d bytes declared", grown>>20, requests, declared)
	return grown
}

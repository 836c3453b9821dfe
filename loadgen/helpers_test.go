// Test helpers: origin servers on loopback and a goroutine leak check.

package loadgen

import (
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/origin"
)

// Short runs: the tests check that the generators work, not how fast; the
// window is long enough to see bytes move on a busy 2-core machine.
const (
	testDur    = 300 * time.Millisecond
	testWarmup = 50 * time.Millisecond
	// testBound is how long any generator may take beyond its own time.
	testBound = 5 * time.Second
)

// startOrigin returns an origin Server closed at the end of the test.
func startOrigin(tb testing.TB) *origin.Server {
	tb.Helper()
	s := origin.New(nil)
	tb.Cleanup(func() { s.Close() })
	return s
}

// serve starts proto on a fresh loopback listener of s and returns its address.
func serve(tb testing.TB, s *origin.Server, proto origin.Proto, opts ...origin.Option) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Serve(proto, l, opts...); err != nil {
		tb.Fatal(err)
	}
	return l.Addr().String()
}

// timeBound fails the test if it has not returned within bound of now.
func timeBound(tb testing.TB, bound time.Duration) {
	tb.Helper()
	start := time.Now()
	tb.Cleanup(func() {
		if took := time.Since(start); took > bound {
			tb.Errorf("took %v, bound %v", took, bound)
		}
	})
}

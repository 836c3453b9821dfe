// Package origintest runs the origin server as a test's back end: served on a listener the test opened, closed when the test ends.
package origintest

import (
	"net"
	"testing"

	"github.com/splicer/splicer/origin"
)

// Serve serves the origin's protocol proto on ln until the test ends,
// and returns the server (its Stats count what it accepted).
func Serve(tb testing.TB, ln net.Listener, proto origin.Proto, opts ...origin.Option) *origin.Server {
	tb.Helper()
	srv := origin.New(nil)
	tb.Cleanup(func() { srv.Close() })
	if err := srv.Serve(proto, ln, opts...); err != nil {
		tb.Fatalf("origin %s on %s: %v", proto, ln.Addr(), err)
	}
	return srv
}

// Tests of Pair: the FIN bookkeeping engines share across splices.

package engine_test

import (
	"io"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/enginetest"
)

// TestForwardFINOncePerUpstream checks that a FIN forwarded up is not
// forwarded again to the same upstream, but is to a new one (an HTTP proxy
// that took another connection from its pool).
func TestForwardFINOncePerUpstream(t *testing.T) {
	c := enginetest.NewPair(t)
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, c.Server)
	c.Server.CloseWrite()
	time.Sleep(50 * time.Millisecond) // the server's FIN closes the forwarder's socket
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatalf("second FIN to the same upstream: %v, want nothing done", err)
	}

	next := enginetest.NewPair(t)
	c.Pair.SetUpstream(next.Pair.Upstream())
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, next.Server)
}

func expectEOF(tb testing.TB, c interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		tb.Fatalf("read = %d, %v; want EOF", n, err)
	}
}

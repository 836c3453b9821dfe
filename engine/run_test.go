// Tests of Run: what a direction meets after the splice ended is not lost.

package engine_test

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/enginetest"
)

// stoppedPump is a pump that moves nothing: it reads its source until the
// splice ends (the deadline Run sets) and then returns what up returns for
// the client's direction, as if its last write had just finished so, and
// the read's error for the other.
func stoppedPump(p *engine.Pair, up func() error) engine.Pump {
	return func(src, _ *net.TCPConn, _ int64, _ func(int64)) error {
		_, err := src.Read(make([]byte, 1))
		if src == p.Client {
			return up()
		}
		return err
	}
}

// TestRunKeepsAResetMetAfterTheTimer: a splice that a timer ends lets
// writes finish; one that finishes with the peer's reset ends the pair.
// The kernel reports a reset once, so the next splice would read a plain
// EOF from that socket: dropped here, a client's reset reached the server
// as a FIN (TestLabRandomResets, once in about 4,000 pairs).
func TestRunKeepsAResetMetAfterTheTimer(t *testing.T) {
	c := enginetest.NewPair(t)
	reset := fmt.Errorf("write: %w", syscall.ECONNRESET)
	opts := engine.Both(0)
	opts.For = 20 * time.Millisecond
	res, err := engine.Run(context.Background(), c.Pair, opts, stoppedPump(c.Pair, func() error { return reset }))
	if err != nil {
		t.Fatal(err)
	}
	if res.End != engine.EndReset || res.Dir != engine.Up {
		t.Fatalf("splice ended %v (%v), want reset (up): the reset the write met was dropped", res.End, res.Dir)
	}
}

// TestRunKeepsAFINForwardedAfterTheTimer: a direction that read its EOF as
// the timer ended the splice forwarded the FIN; the result says so, so
// that the next splice holds that direction rather than forwarding it.
func TestRunKeepsAFINForwardedAfterTheTimer(t *testing.T) {
	c := enginetest.NewPair(t)
	opts := engine.Both(0)
	opts.For = 20 * time.Millisecond
	res, err := engine.Run(context.Background(), c.Pair, opts, stoppedPump(c.Pair, func() error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if res.End != engine.EndTimer || !res.EOF[engine.Up] || res.EOF[engine.Down] {
		t.Fatalf("splice ended %v with EOF %v, want the timer with the client's direction EOF", res.End, res.EOF)
	}
	expectEOF(t, c.Server)
}

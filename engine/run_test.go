// Tests of Run: what a direction meets after the splice ended is not lost, promotions end a splice with the pair intact, and a splice takes one goroutine beside the caller.

package engine_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	copyengine "github.com/splicer/splicer/engine/copy"
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

// TestRunPromotesAtBytes: a splice with Promote.Bytes ends with EndPromote,
// the pair intact, once that many bytes moved; a second splice carries
// the rest, and the stream arrives whole.
func TestRunPromotesAtBytes(t *testing.T) {
	c := enginetest.NewPair(t)
	e := copyengine.New(4 << 10)
	msg := enginetest.Random(1<<20, 1)
	go enginetest.SendThenClose(t, c.Client, msg)
	got := make(chan [32]byte, 1)
	go func() { got <- enginetest.DigestAll(t, c.Server) }()
	c.Server.CloseWrite()

	opts := engine.Both(0)
	opts.Promote = engine.Promotion{Bytes: 64 << 10}
	first, err := e.Splice(context.Background(), c.Pair, opts)
	if err != nil {
		t.Fatal(err)
	}
	if first.End != engine.EndPromote || first.Moved[engine.Up] < 64<<10 || first.Moved[engine.Up] == 1<<20 {
		t.Fatalf("first splice ended %v having moved %v, want promote past 64 KiB and before the end", first.End, first.Moved)
	}
	rest := engine.Both(0)
	if first.EOF[engine.Down] {
		rest.Down.Mode = engine.Hold
	}
	if res, err := e.Splice(context.Background(), c.Pair, rest); err != nil || res.End != engine.EndEOF {
		t.Fatalf("the rest: %+v, %v", res, err)
	}
	if <-got != sha256.Sum256(msg) {
		t.Fatal("the stream arrived changed across the promotion")
	}
}

// TestRunPromotesAfter: a splice with Promote.After ends with EndPromote
// once that long elapsed, on a pair that moved nothing.
func TestRunPromotesAfter(t *testing.T) {
	c := enginetest.NewPair(t)
	opts := engine.Both(0)
	opts.Promote = engine.Promotion{Bytes: 1 << 30, After: 20 * time.Millisecond}
	res, err := copyengine.New(0).Splice(context.Background(), c.Pair, opts)
	if err != nil || res.End != engine.EndPromote || !res.End.KeepsPair() {
		t.Fatalf("splice ended %+v, %v; want promote, the pair kept", res, err)
	}
}

// TestRunTakesOneGoroutineBesideTheCaller: a splice forwarding both
// directions runs one of them on the caller's goroutine, so that a pair
// costs one goroutine more than its proxy's, not two.
func TestRunTakesOneGoroutineBesideTheCaller(t *testing.T) {
	c := enginetest.NewPair(t)
	base := runtime.NumGoroutine()
	during := make(chan int, 1)
	opts := engine.Both(0)
	opts.OnSpliced = func() { during <- runtime.NumGoroutine() }
	ch := enginetest.SpliceAsync(t, copyengine.New(0), c.Pair, opts)
	n := <-during
	c.Client.CloseWrite()
	c.Server.CloseWrite()
	if r := enginetest.Wait(t, ch); r.End != engine.EndEOF {
		t.Fatalf("splice ended %v, want EOF", r.End)
	}
	// SpliceAsync's goroutine is the caller's.
	if extra := n - base - 1; extra != 1 {
		t.Fatalf("the splice took %d goroutines beside the caller's, want 1", extra)
	}
}

// TestRunAllocations bounds what a splice of a pair that closes at once
// allocates, under a context a listener shares with its other pairs, with
// an idle timeout: the runner, its channels and one idle timer, but no
// registration with the context per splice nor closures per timer.
func TestRunAllocations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := enginetest.NewPair(t)
	eof := func(_, _ *net.TCPConn, _ int64, _ func(int64)) error { return nil }
	opts := engine.Both(time.Hour)
	engine.Run(ctx, c.Pair, opts, eof) // the context's watch is made once
	allocs := testing.AllocsPerRun(200, func() {
		if res, err := engine.Run(ctx, c.Pair, opts, eof); err != nil || res.End != engine.EndEOF {
			t.Fatalf("splice ended %v, %v; want eof", res.End, err)
		}
	})
	t.Logf("%.1f allocations per splice", allocs)
	if allocs > 8 {
		t.Errorf("a splice allocates %.1f times, want at most 8", allocs)
	}
}

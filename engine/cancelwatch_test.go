// Tests of the watch splices share on their context: every splice running under a context that is cancelled ends as cancelled, and ended ones leave it.

package engine_test

import (
	"context"
	"io"
	"testing"

	"github.com/splicer/splicer/engine"
	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/enginetest"
)

// TestRunCancelEndsEverySpliceOfTheContext: of splices under one context,
// those that ended on their own before the cancel end with their EOFs,
// and every one still running when it comes ends as cancelled, the first
// and the last started included; a splice started after the cancel ends
// as cancelled at once.
func TestRunCancelEndsEverySpliceOfTheContext(t *testing.T) {
	e := copyengine.New(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 6
	conns := make([]*enginetest.Conns, n)
	results := make([]chan engine.Result, n)
	for i := range conns {
		conns[i] = enginetest.NewPair(t)
		results[i] = make(chan engine.Result, 1)
		go func(c *enginetest.Conns, ch chan engine.Result) {
			r, _ := e.Splice(ctx, c.Pair, engine.Both(0))
			ch <- r
		}(conns[i], results[i])
		// Each splice runs (its byte crosses) before the next starts.
		conns[i].Client.Write([]byte("x"))
		io.ReadFull(conns[i].Server, make([]byte, 1))
	}
	// The second and the fourth end first: both sides close.
	for _, i := range []int{1, 3} {
		conns[i].Client.CloseWrite()
		conns[i].Server.CloseWrite()
		if r := enginetest.Wait(t, results[i]); r.End != engine.EndEOF {
			t.Fatalf("splice %d ended %v, want eof", i, r.End)
		}
	}
	cancel()
	for i, ch := range results {
		if i == 1 || i == 3 {
			continue
		}
		if r := enginetest.Wait(t, ch); r.End != engine.EndCancel {
			t.Fatalf("splice %d ended %v, want cancel", i, r.End)
		}
	}
	late := enginetest.NewPair(t)
	if r, _ := e.Splice(ctx, late.Pair, engine.Both(0)); r.End != engine.EndCancel {
		t.Fatalf("splice started after the cancel ended %v, want cancel", r.End)
	}
}

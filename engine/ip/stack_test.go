// A splice fits the stack of a goroutine that did little before it: growing a stack copies it, which costs more than most steps of a splice.

package ip

import (
	"context"
	"log/slog"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/splicer/splicer/engine"
)

// TestSpliceFitsEightKiBStack splices idle pairs on goroutines whose
// stacks are 8 KiB, and checks that the stack was not moved to a larger one
// by the time the pair is spliced (OnSpliced): a splice that needed more
// copied every caller's stack to 16 KiB, tens of microseconds of a splice
// that otherwise costs a hundred or so.
func TestSpliceFitsEightKiBStack(t *testing.T) {
	el := newEngineLabLogging(t, Options{}, slog.New(slog.DiscardHandler))
	// A collection may shrink the stack, which moves it too.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// The first splice looks the devices up and attaches the program:
	// once per device, not per splice.
	for i := range 4 {
		lp := el.pair(t, "")
		type outcome struct {
			spliced, moved bool
			depth          uintptr
			err            error
		}
		out := make(chan outcome, 1)
		go func() {
			var o outcome
			growStackTo8KiB(0)
			top := stackAddr()
			_, o.err = el.e.Splice(context.Background(), lp.p, engine.Options{
				OnSpliced: func() {
					o.spliced = true
					// On the same stack, deeper than top and less than its
					// 8 KiB below; a moved stack is elsewhere.
					at := stackAddr()
					o.depth = top - at
					o.moved = at > top || top-at >= 8<<10
				},
				OnDetached: func() { lp.p.CloseConns() },
				OnEnd:      func(engine.Result) {},
			})
			out <- o
		}()
		o := <-out
		if o.err != nil || !o.spliced {
			t.Fatalf("pair %d: Splice returned %v, spliced %v", i, o.err, o.spliced)
		}
		if o.moved && i > 0 {
			t.Errorf("pair %d: the splicing goroutine's stack moved (grew past 8 KiB) before the pair was spliced", i)
		}
	}
}

// growStackTo8KiB grows the calling goroutine's stack to 8 KiB, from the
// 2 KiB a goroutine starts with; it stays so until a collection shrinks it.
//
//go:noinline
func growStackTo8KiB(i int) byte {
	var buf [5 << 10]byte
	buf[i] = byte(i)
	return buf[(i+1)%len(buf)]
}

// stackAddr returns an address in its own frame: on the caller's stack,
// just below the caller's frame.
//
//go:noinline
func stackAddr() uintptr {
	var b byte
	return uintptr(unsafe.Pointer(&b))
}

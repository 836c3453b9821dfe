// cancelWatch: one callback per context for every splice that runs under it, so a splice joins a list instead of registering with the context.

package engine

import (
	"context"
	"sync"
)

// A listener runs all its pairs under one context: a callback of that
// context per splice (context.AfterFunc) costs allocations and takes the
// context's own lock, shared by every pair, twice a splice. Splices
// instead join the watch of their context's Done channel, a list with
// one callback of the context for them all, made by the first splice
// under the context and dropped when the context is done. A context
// never done keeps its watch, as it keeps its own registration with its
// parent.
type cancelWatch struct {
	mu   sync.Mutex
	head *runner // the splices watching, linked by runner.wnext/wprev
	done bool    // the context is done: joiners cancel themselves
}

// cancelWatches maps a context's Done channel to its *cancelWatch.
var cancelWatches sync.Map

// watchCancel has r cancelled (evCancel) when ctx is done; unwatchCancel
// undoes it. ctx.Done() must not be nil.
func (r *runner) watchCancel(ctx context.Context) {
	done := ctx.Done()
	w, ok := cancelWatches.Load(done)
	if !ok {
		nw := &cancelWatch{}
		if w, ok = cancelWatches.LoadOrStore(done, nw); !ok {
			context.AfterFunc(ctx, func() { nw.fire(done) })
		}
	}
	cw := w.(*cancelWatch)
	cw.mu.Lock()
	if cw.done {
		cw.mu.Unlock()
		r.send(event{kind: evCancel}, nil)
		return
	}
	r.cw = cw
	r.wnext = cw.head
	if cw.head != nil {
		cw.head.wprev = r
	}
	cw.head = r
	cw.mu.Unlock()
}

// unwatchCancel takes r off its context's watch. A cancel already under
// way may still send r its event, which r then no longer takes.
func (r *runner) unwatchCancel() {
	cw := r.cw
	if cw == nil {
		return
	}
	cw.mu.Lock()
	if !cw.done {
		if r.wprev != nil {
			r.wprev.wnext = r.wnext
		} else {
			cw.head = r.wnext
		}
		if r.wnext != nil {
			r.wnext.wprev = r.wprev
		}
	}
	r.wprev, r.wnext, r.cw = nil, nil, nil
	cw.mu.Unlock()
}

// fire cancels every splice watching, once the context whose Done
// channel is done is: the list is taken whole, and later joiners cancel
// themselves.
func (cw *cancelWatch) fire(done <-chan struct{}) {
	cancelWatches.Delete(done)
	cw.mu.Lock()
	cw.done = true
	var rs []*runner
	for r := cw.head; r != nil; r = r.wnext {
		rs = append(rs, r)
	}
	cw.head = nil
	cw.mu.Unlock()
	for _, r := range rs {
		r.send(event{kind: evCancel}, nil)
	}
}

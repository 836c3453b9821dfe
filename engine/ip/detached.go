// Following the pairs spliced until they close without their callers (engine.Options.OnEnd): the datapath's events and one ticking goroutine for all of them, instead of a goroutine, a ticker and a channel per pair.

package ip

import (
	"context"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"
)

// detached is a pair the engine follows on its own, until it ends and
// onEnd gets its Result.
type detached struct {
	// mu guards f (and f.ended): the datapath's news (notify) and the
	// ticker reach the pair from different goroutines. The record takes
	// 224 bytes, one for each of 100,000 idle pairs.
	mu    sync.Mutex
	f     follower
	since time.Duration // as spliced.since: older events are an earlier splice's
	idle  time.Duration
	onEnd func(engine.Result)
	// ctx ends the pair when cancelled, seen at the next tick (a
	// context.AfterFunc per pair would cost more than the pair's state).
	ctx context.Context
	// next is the pair after this one whose A tuple hashes alike
	// (followers.detached), guarded by followers.mu.
	next *detached
}

// detach hands a spliced pair that can no longer be given back and owes
// no bytes (any more) to the engine's own following, with its follower
// f, and returns EndDetached: the caller's goroutine, buffers and
// per-pair timers go, and opts.OnEnd gets the pair's Result when it ends.
func (e *Engine) detach(ctx context.Context, f follower, sp spliced, opts engine.Options) engine.Result {
	f.drained = nil // delivered, or never owed
	d := &detached{f: f, since: sp.since, idle: opts.IdleTimeout, onEnd: opts.OnEnd, ctx: ctx}
	// The datapath keeps none of its segments any more: keeping serves
	// transitions, and this pair has none left.
	e.dp.StopGathering(sp.a)
	e.followed.handOver(sp.a, d)
	e.followed.tickOnce.Do(func() { e.followed.start(e.tickDetached) })
	// News that came before the handover.
	for len(sp.ch) > 0 {
		e.onDetachedNotice(d, <-sp.ch)
	}
	d.mu.Lock()
	moved := d.f.counted
	d.mu.Unlock()
	return engine.Result{End: engine.EndDetached, Moved: moved}
}

// onDetachedNotice passes the datapath's news to a detached pair.
func (e *Engine) onDetachedNotice(d *detached, n notice) {
	d.mu.Lock()
	if d.f.ended || (n.removed == "" && n.ev.Time < d.since) {
		d.mu.Unlock()
		return
	}
	res, end := d.f.onNotice(n)
	e.settle(d, res, end)
}

// tickDetached does for every detached pair, each statsEvery, what a
// follower's tick does (counters for /flows, missed events, the idle
// timeout, a cancelled context), until Close.
func (e *Engine) tickDetached() {
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	var ds []*detached
	for {
		select {
		case <-e.followed.stop:
			return
		case <-t.C:
		}
		ds = e.followed.detachedPairs(ds[:0])
		for _, d := range ds {
			if d.ctx.Err() != nil {
				e.cancelDetached(d)
				continue
			}
			d.mu.Lock()
			if d.f.ended {
				d.mu.Unlock()
				continue
			}
			res, end := d.f.onTick(d.idle)
			e.settle(d, res, end)
		}
	}
}

// cancelDetached ends a detached pair whose context was cancelled, as
// follow does: left forwarding for the next process after LeavePairs,
// removed (its peers reset) otherwise.
func (e *Engine) cancelDetached(d *detached) {
	d.mu.Lock()
	if d.f.ended {
		d.mu.Unlock()
		return
	}
	d.f.refresh()
	if !e.leavesPairs() {
		d.f.remove()
	}
	e.settle(d, d.f.end(engine.EndCancel, nil), true)
}

// settle, with d.mu held (it unlocks), ends d if end: it leaves the
// detached pairs and its Result goes to onEnd.
func (e *Engine) settle(d *detached, res engine.Result, end bool) {
	if !end {
		d.mu.Unlock()
		return
	}
	d.f.ended = true
	d.mu.Unlock()
	e.followed.drop(d)
	d.onEnd(res)
}

// endDetached ends every detached pair still followed, as a cancel
// would, when the engine closes.
func (e *Engine) endDetached() {
	for _, d := range e.followed.detachedPairs(nil) {
		e.cancelDetached(d)
	}
}

// Following a spliced pair to its end: counters for /flows, the datapath's events and phases, idle timeouts, and resetting the peers of a pair removed early.

package ip

import (
	"context"
	"errors"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// notice is news about a spliced pair for the Splice that follows it.
type notice struct {
	ev datapath.Event
	// removed: Sweep removed the pair for this reason ("reset",
	// "time_wait", "idle").
	removed string
}

// follow waits for the spliced pair to end, copying its byte counters
// to p as they grow; meanwhile it delivers the bytes owed at splice time,
// with the pair in StateDraining until they are acknowledged.
func (e *Engine) follow(ctx context.Context, p *engine.Pair, sp spliced, opts engine.Options) engine.Result {
	a, ch := sp.a, sp.ch
	defer e.followed.unregister(a)
	f := e.newFollower(p, sp)
	// The drain of owed bytes runs on a goroutine of its own (drained)
	// beside an unsplicer, whose wait for the receivers' acks needs it to
	// go on; otherwise (every short pair) this loop polls it (drainC).
	var drained chan error
	var drainT *time.Timer
	var drainC <-chan time.Time
	if sp.drain != nil {
		opts.ReportDraining(true)
		if sp.fz != nil {
			drained = make(chan error, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() { drained <- sp.drain.run(stop) }()
		} else {
			drainT = time.NewTimer(0)
			drainC = drainT.C
			defer func() {
				drainT.Stop()
				if drainC != nil {
					sp.drain.free() // stopped while draining
				}
			}()
		}
	}
	var u *unsplicer
	if sp.fz != nil {
		u = newUnsplicer(e, p, sp, opts)
		defer u.stop()
	}
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		select {
		case <-u.timerC():
			if res, done := u.unsplice(&f, ch, engine.EndTimer, engine.Up); done {
				return res
			}
			u = nil // a FIN was forwarded meanwhile: the pair runs to its end
		case <-drainC:
			wait, done, err := sp.drain.poll()
			if !done {
				drainT.Reset(wait)
				continue
			}
			drainC = nil
			sp.drain.free()
			if res, done := e.drainEnded(ctx, f, sp, opts, err); done {
				return res
			}
		case err := <-drained:
			drained = nil
			if res, done := e.drainEnded(ctx, f, sp, opts, err); done {
				return res
			}
		case <-ctx.Done():
			f.refresh()
			if sp.fz == nil && drained == nil && drainC == nil && e.leavesPairs() {
				// Left forwarding in the pinned datapath for the next
				// process (LeavePairs). A pair that may be given back,
				// or still owes bytes, needs this process's sockets
				// or drain, and is removed as on any cancel.
				return f.end(engine.EndCancel, nil)
			}
			f.remove()
			return f.end(engine.EndCancel, nil)
		case n := <-ch:
			if n.removed == "" && n.ev.Time < sp.since {
				continue // an earlier splice's, read late
			}
			if u != nil && n.removed == "" && n.ev.Kind == datapath.EventFIN {
				u = u.plain(f.a) // a half-closed pair cannot be rebuilt: it runs to its end
			}
			if u != nil && n.removed == "" {
				if end, dir, ok := u.onEvent(n.ev); ok {
					if res, done := u.unsplice(&f, ch, end, dir); done {
						return res
					}
					u = nil
					continue
				}
			}
			if res, done := f.onNotice(n); done {
				return res
			}
		case <-tick.C:
			if res, done := f.onTick(opts.IdleTimeout); done {
				return res
			}
			if u != nil {
				// The follower records only the phase: the unsplicer's
				// triggers read the rest again.
				st, err := f.dp.Lookup(f.a)
				if end, dir, ok := u.onStats(st); err == nil && ok {
					e.log.Debug("unsplice on tick", "pair", p.ID)
					if res, done := u.unsplice(&f, ch, end, dir); done {
						return res
					}
					u = nil
				}
			}
		}
	}
}

// drainEnded reports the end of the drain of owed bytes (err nil: all
// delivered) and, for a pair delivered that no unsplicer keeps and whose
// caller wants OnEnd, hands it to the engine (detach), done.
func (e *Engine) drainEnded(ctx context.Context, f follower, sp spliced, opts engine.Options, err error) (engine.Result, bool) {
	if err == nil {
		opts.ReportDraining(false)
	}
	sp.drain.logDone(e.log, f.p.ID, err)
	if sp.fz == nil && opts.OnEnd != nil {
		// Delivered: the engine follows it with the others.
		return e.detach(ctx, f, sp, opts), true
	}
	return engine.Result{}, false
}

// newFollower starts following the spliced pair: the receive queues'
// bytes the drain delivers count as moved from the start.
func (e *Engine) newFollower(p *engine.Pair, sp spliced) follower {
	f := follower{p: p, a: sp.a, dp: e.dp, e: e, lastMove: monoNow(), extra: sp.unread, seed: streamSeed{seq: sp.seed, fin: sp.seedFIN}}
	if sp.drain != nil {
		f.drained = sp.drain.lastProgress
	}
	for d, n := range sp.unread {
		p.AddBytes(engine.Direction(d), n)
		f.counted[d] = n
	}
	return f
}

// follower is the state of one followed pair. A detached pair keeps it
// for its life: its fields are ordered so that the small ones share
// one word.
type follower struct {
	// e resets both peers of a pair removed early (resetPeers), whose
	// spec the datapath holds until then; nil in tests. One pointer
	// where two method values would cost a pair 32 bytes more.
	e       *Engine
	p       *engine.Pair
	dp      *datapath.Datapath
	a       datapath.Tuple
	counted [2]int64 // bytes already added to p
	// extra: bytes counted at splice time (the unread receive queues)
	// on top of the datapath's counters.
	extra [2]int64
	// acked is each direction's highest ACK when last seen: a pair whose
	// ACKs advance is not idle.
	acked [2]uint32
	// seed is where each direction's stream started when published,
	// for streamBytes.
	seed streamSeed
	eof  [2]bool
	// closedClean: both FINs were acknowledged. A reset after that (say,
	// a peer that already forgot the connection answering a late
	// segment) does not turn the clean end into a reset.
	closedClean bool
	resetDir    engine.Direction
	// phase is the pair's phase at the latest refresh (the rest of its
	// state, 170 bytes, is not stored: a detached pair would carry it
	// for its life).
	phase datapath.Phase
	// ended: a detached pair ended and its Result went to its OnEnd
	// (guarded by detached.mu).
	ended bool
	// lastMove is when the pair last moved, on the monotonic clock
	// (monoNow): 8 bytes where a time.Time takes 24.
	lastMove time.Duration
	// drained, if set, says when the drain last delivered owed bytes:
	// that is movement too, though the datapath's counters stand still.
	drained func() time.Time
}

// monoEpoch is what monoNow counts from.
var monoEpoch = time.Now()

// monoNow is the time on the monotonic clock, as a duration since
// monoEpoch.
func monoNow() time.Duration { return time.Since(monoEpoch) }

// streamSeed is each direction's SndNxt when the pair was published (as
// spliced.seed), and whether it included a FIN already received.
type streamSeed struct {
	seq [2]uint32
	fin [2]bool
	// adopted: an adopted pair, whose seed is unknown (streamBytes
	// takes the datapath's counter as it is) and whose port this
	// engine's allocator does not hold.
	adopted bool
}

// refresh copies the pair's counters to p; false when the pair is gone.
func (f *follower) refresh() (bool, error) {
	st, err := f.dp.Lookup(f.a)
	if err != nil {
		return false, err
	}
	f.phase = st.Phase
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		ds := st.Dir(d)
		// A correction of streamBytes may take the count back by a byte.
		if n := int64(f.streamBytes(d, ds)) + f.extra[d]; n != f.counted[d] {
			f.p.AddBytes(d, n-f.counted[d])
			if n > f.counted[d] {
				f.lastMove = monoNow()
			}
			f.counted[d] = n
		}
		f.eof[d] = f.eof[d] || ds.FIN
		// Retransmissions filling holes move no new byte, but a
		// receiver acknowledging them is progress all the same.
		if ds.AckHi != f.acked[d] {
			f.acked[d] = ds.AckHi
			f.lastMove = monoNow()
		}
	}
	if f.drained != nil {
		if t := f.drained().Sub(monoEpoch); t > f.lastMove {
			f.lastMove = t
		}
	}
	f.closedClean = f.closedClean || (st.Up.FIN && st.Up.FINAcked && st.Down.FIN && st.Down.FINAcked)
	return true, nil
}

// streamBytes is the datapath's byte count of direction d. Once the
// direction's FIN was forwarded its low 32 bits must equal the sequence
// distance from the published SndNxt to the FIN: the pair's count has been
// seen one over after a mid-stream splice (1 pair in about 50, cause not
// found yet), so the distance, which is exact, corrects it.
func (f *follower) streamBytes(d engine.Direction, ds datapath.DirStats) uint64 {
	if !ds.FIN || f.seed.adopted {
		return ds.Bytes
	}
	dist := ds.SndNxt - f.seed.seq[d]
	if !f.seed.fin[d] {
		dist-- // the FIN takes one sequence number
	}
	// Lookup's fields are not one snapshot: trust the distance only when
	// it is close to the counter.
	over := int32(uint32(ds.Bytes) - dist)
	if over != 0 && over > -16 && over < 16 {
		return uint64(int64(ds.Bytes) - int64(over))
	}
	return ds.Bytes
}

// remove deletes the pair; one Sweep already removed needs nothing more.
func (f *follower) remove() {
	st, err := f.dp.Lookup(f.a)
	spec, serr := f.dp.Spec(f.a)
	f.dp.Delete(f.a)
	if f.e != nil && !f.seed.adopted {
		// e.ports lets go of what holds the pair's port (porthold.go).
		f.e.ports.release(f.a)
	}
	if err == nil && serr == nil && f.e != nil && st.Phase != datapath.PhaseClosed {
		f.e.resetPeers(spec, st)
	}
}

func (f *follower) end(end engine.End, err error) engine.Result {
	r := engine.Result{End: end, Moved: f.counted, EOF: f.eof, Err: err}
	if end == engine.EndReset {
		r.Dir = f.resetDir
	}
	return r
}

func (f *follower) onNotice(n notice) (engine.Result, bool) {
	if n.removed != "" {
		return f.gone(n.removed), true
	}
	f.refresh()
	switch n.ev.Kind {
	case datapath.EventFIN:
		f.eof[n.ev.Dir] = true
	case datapath.EventReset:
		if f.closedClean {
			return f.end(engine.EndEOF, nil), true
		}
		f.resetDir = n.ev.Dir
		return f.end(engine.EndReset, nil), true
	case datapath.EventTimeWait:
		return f.end(engine.EndEOF, nil), true
	}
	return engine.Result{}, false
}

// onTick catches what events may have missed (a full ring buffer) and
// enforces the idle timeout.
func (f *follower) onTick(idle time.Duration) (engine.Result, bool) {
	ok, err := f.refresh()
	switch {
	case errors.Is(err, datapath.ErrNotFound):
		return f.gone(""), true
	case err != nil || !ok:
		return f.end(engine.EndError, err), true
	case f.closedClean || f.phase == datapath.PhaseTimeWait:
		return f.end(engine.EndEOF, nil), true
	case f.phase == datapath.PhaseClosed:
		return f.end(engine.EndReset, nil), true
	case idle > 0 && monoNow()-f.lastMove >= idle:
		f.remove()
		return f.end(engine.EndIdle, nil), true
	}
	return engine.Result{}, false
}

// gone ends a pair that Sweep removed, for reason if known.
func (f *follower) gone(reason string) engine.Result {
	switch {
	case f.closedClean:
		return f.end(engine.EndEOF, nil)
	case reason == "reset" || f.phase == datapath.PhaseClosed:
		return f.end(engine.EndReset, nil)
	case reason == "time_wait" || f.phase == datapath.PhaseTimeWait:
		return f.end(engine.EndEOF, nil)
	}
	return f.end(engine.EndIdle, nil)
}

// resetPeers sends each peer of a pair just removed from the table (on
// cancel or idle) a reset at the highest sequence number forwarded to it.
// A peer that has received everything accepts it; one with bytes still in
// flight answers with a challenge ACK, which now reaches the forwarder's
// stack, which has no socket for it and resets it exactly.
func (e *Engine) resetPeers(spec datapath.PairSpec, st datapath.PairStats) {
	fd, err := e.inject.open(spec.A.Src.Addr().Is6(), e.home.do)
	if err != nil {
		e.log.Warn("resetting the peers of a removed pair", "err", err)
		return
	}
	var buf [60]byte
	toClient := buildSegment(buf[:], spec.A.Dst, spec.A.Src, st.Down.SndNxt+spec.Down.SeqOff, segFields{ack: st.Up.SndNxt, flags: 0x14}, nil)
	e.inject.send(fd, spec.A.Src.Addr(), toClient)
	toServer := buildSegment(buf[:], spec.B.Dst, spec.B.Src, st.Up.SndNxt+spec.Up.SeqOff, segFields{ack: st.Down.SndNxt, flags: 0x14}, nil)
	e.inject.send(fd, spec.B.Src.Addr(), toServer)
}

// notify passes n to the Splice following pair a, if any. It never
// blocks: a waiter that is behind catches up from Lookup on its next tick.
func (e *Engine) notify(a datapath.Tuple, n notice) {
	ch, d := e.followed.lookup(a)
	if d != nil {
		e.onDetachedNotice(d, n)
		return
	}
	if ch == nil {
		return
	}
	select {
	case ch <- n:
	default:
	}
}

// readEvents hands the program's events to the pairs' followers until the
// datapath closes.
func (e *Engine) readEvents() {
	for {
		ev, err := e.dp.ReadEvent()
		switch {
		case errors.Is(err, datapath.ErrClosed):
			return
		case err != nil:
			e.log.Warn("reading datapath events", "err", err)
			continue
		case ev.Found:
			e.ports.ended(e.dp, ev)
			e.notify(ev.Pair, notice{ev: ev})
		}
	}
}

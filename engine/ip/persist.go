// Pairs that outlive the process: this process's datapath pinned in a generation directory under Options.PinDir, and the datapaths earlier processes left there adopted: their pairs followed, swept and counted until they end, then unpinned.

package ip

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// pins is the engine's side of Options.PinDir. Each process pins its own
// datapath in a generation directory of its own and holds an flock on it
// for its life; a directory whose lock is free belongs to a process that
// is gone (SIGKILL, or an upgrade's old process that left its pairs), and
// is adopted. One writer per table: an upgrade's two processes run at the
// same time, and each follows only its own pairs.
type pins struct {
	dir string

	// mu guards closed, own, ownLock, failed, gens, skipped and
	// retired: the own generation and the adopted ones under one lock,
	// so a scan of dir tells them apart (adoptAll, claimOthers).
	mu      sync.Mutex
	closed  bool
	own     string   // this process's generation directory, once pinned
	ownLock *os.File // its flock
	failed  bool     // pinning failed (logged once): pairs stay with the process
	// settled: own or failed is set, so splices need not take mu.
	settled atomic.Bool
	gens    map[string]*adoptedGen
	// skipped are directories left alone (incompatible), logged once.
	skipped map[string]bool
	// retired sums the counters of adopted datapaths already unpinned,
	// so that the engine's counters never go back.
	retired map[string]uint64

	adopted, adoptedReset atomic.Int64
}

func newPins(dir string) *pins {
	return &pins{dir: dir, gens: map[string]*adoptedGen{}, skipped: map[string]bool{}, retired: map[string]uint64{}}
}

// adoptedGen is a datapath an earlier process pinned, and its pairs.
type adoptedGen struct {
	dir  string
	dp   *datapath.Datapath
	lock *os.File

	// mu guards waiters and pairs: the followers, the event reader,
	// the sweep and /flows reach them from their own goroutines.
	mu      sync.Mutex
	waiters map[datapath.Tuple]chan notice
	pairs   map[datapath.Tuple]*adoptedPair // followed, for /flows
	follow  sync.WaitGroup
}

// adoptedPair is one adopted pair while it is followed.
type adoptedPair struct {
	spec datapath.PairSpec
	// p holds its counters and state for the follower and /flows: the
	// engine's own Pair, no forwarder's (it has no sockets here).
	p  *engine.Pair
	at time.Time
}

// LeavePairs implements engine.Outliving: from now on a pair still spliced
// when its splice is cancelled is left in the pinned datapath, and Close
// leaves the datapath pinned with whatever pairs it holds (adopted ones
// too), for the next process. Without a pin directory (or when pinning
// failed) it changes nothing: the pairs are closed as before.
func (e *Engine) LeavePairs() { e.followed.leave.Store(true) }

// leavesPairs reports whether cancelled pairs stay for the next process.
func (e *Engine) leavesPairs() bool { return e.followed.leave.Load() && e.dp.Pinned() != "" }

// pinOwn pins this process's datapath, once, before its first attachment.
// A failure is logged and leaves the engine unpinned.
func (e *Engine) pinOwn() {
	p := e.pins
	if p == nil || p.settled.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own != "" || p.failed || p.closed {
		return
	}
	defer p.settled.Store(true)
	var err error
	for try := 0; try < 3; try++ {
		// Another process's scan may lock or remove a directory between
		// its creation and its lock: try another name.
		if err = e.pinIn(p); err == nil || !errors.Is(err, errLocked) && !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		p.failed = true
		e.log.Warn("not pinning the datapath: spliced pairs will not outlive this process", "pin_dir", p.dir, "err", err)
		return
	}
	e.log.Info("datapath pinned: spliced pairs outlive this process", "dir", p.own)
}

func (e *Engine) pinIn(p *pins) error {
	if err := ensureBPFFS(p.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	dir := filepath.Join(p.dir, fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.Remove(dir)
		return err
	}
	if err := e.dp.Pin(dir, e.home.ino); err != nil {
		lock.Close()
		os.Remove(dir)
		return err
	}
	p.own, p.ownLock = dir, lock
	return nil
}

// adoptAll adopts every datapath in the pin directory whose process is
// gone. It runs at load and on every sweep, which catches the old process
// of an upgrade once it exits.
func (e *Engine) adoptAll() {
	p := e.pins
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return // nothing pinned yet, or nowhere to pin
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ent := range ents {
		dir := filepath.Join(p.dir, ent.Name())
		if p.closed || !ent.IsDir() || dir == p.own || p.gens[dir] != nil || p.skipped[dir] {
			continue
		}
		lock, err := lockDir(dir)
		if err != nil {
			continue // its process lives on, or it just went
		}
		e.adopt(p, dir, lock)
	}
}

// adopt takes over the datapath in dir, whose lock is held; p.mu held.
func (e *Engine) adopt(p *pins, dir string, lock *os.File) {
	dp, info, err := datapath.Adopt(dir, e.datapathOptions(), e.home.ino)
	var ie *datapath.IncompatibleError
	switch {
	case errors.Is(err, datapath.ErrIncomplete):
		// Its process died while pinning, before any pair went in.
		os.RemoveAll(dir)
		lock.Close()
		e.log.Info("removed an incomplete pin directory", "dir", dir)
		return
	case errors.As(err, &ie):
		p.skipped[dir] = true
		lock.Close()
		e.log.Warn("leaving a pinned datapath as it is: its program keeps forwarding its pairs, which this process neither follows nor sweeps; remove the directory once they are over",
			"dir", dir, "reason", ie.Reason)
		return
	case err != nil:
		p.skipped[dir] = true
		lock.Close()
		e.log.Warn("leaving a pinned datapath as it is: it cannot be adopted", "dir", dir, "err", err)
		return
	}
	g := &adoptedGen{dir: dir, dp: dp, lock: lock, waiters: map[datapath.Tuple]chan notice{}, pairs: map[datapath.Tuple]*adoptedPair{}}
	var followed, resets int
	for _, a := range dp.Pairs() {
		spec, err1 := dp.Spec(a)
		st, err2 := dp.Lookup(a)
		switch {
		case err1 != nil || err2 != nil:
			continue
		case st.Phase == datapath.PhaseTimeWait || st.Phase == datapath.PhaseClosed:
			// Over: left to Sweep, which translates late FINs and ACKs meanwhile.
		case spec.Up.Mode != engine.Forward || spec.Down.Mode != engine.Forward || spec.Up.Limited || spec.Down.Limited:
			// Held (a splice under way), watched or limited (to be given
			// back): only the sockets of the process that left it could
			// take it back, and they are gone.
			dp.Delete(a)
			e.resetPeers(spec, st)
			resets++
			e.log.Warn("reset an adopted pair its process was still working on", "client", a.Src, "server", spec.B.Src,
				"up", spec.Up.Mode, "down", spec.Down.Mode, "limited", spec.Up.Limited || spec.Down.Limited)
		default:
			ap := &adoptedPair{spec: spec, p: engine.NewPair(0, "", nil), at: time.Now()}
			ap.p.SetState(engine.StateSpliced)
			g.pairs[a] = ap
			g.waiters[a] = make(chan notice, 8)
			followed++
		}
	}
	p.adopted.Add(int64(followed))
	p.adoptedReset.Add(int64(resets))
	e.log.Info("adopted a pinned datapath", "dir", dir, "pid", info.PID, "pairs", followed, "reset", resets,
		"links", info.Links, "programs_replaced", info.Replaced)
	p.gens[dir] = g
	// The adopted pairs' ports are claimed (Options.OnTable); the range
	// stays reserved for them, and this process gives it back at its end.
	e.ports.reserve(e.home)
	e.followed.start(func() { e.readAdoptedEvents(g) })
	for _, ap := range g.pairs {
		g.follow.Add(1)
		go e.followAdopted(g, ap)
	}
}

// followAdopted follows one adopted pair to its end, as follow does a
// pair of this process: counters, events, phases, the idle timeout.
func (e *Engine) followAdopted(g *adoptedGen, ap *adoptedPair) {
	defer g.follow.Done()
	a := ap.spec.A
	g.mu.Lock()
	ch := g.waiters[a]
	g.mu.Unlock()
	f := follower{p: ap.p, a: a, dp: g.dp, lastMove: monoNow(), seed: streamSeed{adopted: true},
		e: e}
	f.refresh()
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	var res engine.Result
	for done := false; !done; {
		select {
		case <-e.followed.stop:
			if e.followed.leave.Load() {
				return // left pinned for the next process; still listed until Close
			}
			f.refresh()
			f.remove()
			res, done = f.end(engine.EndCancel, nil), true
		case n := <-ch:
			res, done = f.onNotice(n)
		case <-tick.C:
			res, done = f.onTick(e.opts.IdleTimeout)
		}
		if !done && f.phase != datapath.PhaseSpliced {
			ap.p.SetState(engine.StateClosing)
		}
	}
	g.mu.Lock()
	delete(g.pairs, a)
	delete(g.waiters, a)
	g.mu.Unlock()
	e.log.Info("adopted pair ended", "client", a.Src, "server", ap.spec.B.Src, "end", res.End.String(),
		"bytes_up", res.Moved[engine.Up], "bytes_down", res.Moved[engine.Down])
}

// readAdoptedEvents hands an adopted datapath's events to its followers
// until it closes.
func (e *Engine) readAdoptedEvents(g *adoptedGen) {
	for {
		ev, err := g.dp.ReadEvent()
		switch {
		case errors.Is(err, datapath.ErrClosed):
			return
		case err != nil:
			continue
		case ev.Found:
			g.notify(ev.Pair, notice{ev: ev})
		}
	}
}

func (g *adoptedGen) notify(a datapath.Tuple, n notice) {
	g.mu.Lock()
	ch := g.waiters[a]
	g.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- n:
	default:
	}
}

// followed is how many of g's pairs are still followed.
func (g *adoptedGen) followed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pairs)
}

// sweepAdopted sweeps every adopted datapath, retires those left empty,
// and adopts what earlier processes left since the last sweep.
func (e *Engine) sweepAdopted(now time.Duration) {
	p := e.pins
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	for dir, g := range p.gens {
		removed, err := g.dp.Sweep(now)
		if err != nil && !errors.Is(err, datapath.ErrClosed) {
			e.log.Warn("sweeping an adopted pair table", "dir", dir, "err", err)
		}
		for _, r := range removed {
			g.notify(r.Pair, notice{removed: r.Reason})
		}
		if len(g.dp.Pairs()) == 0 && g.followed() == 0 {
			e.retire(p, g)
		}
	}
	p.mu.Unlock()
	e.adoptAll()
}

// retire unpins an adopted datapath whose pairs are all over, which
// detaches its program; p.mu held.
func (e *Engine) retire(p *pins, g *adoptedGen) {
	g.follow.Wait()
	for _, read := range []func() (map[string]uint64, error){g.dp.Drops, g.dp.Counters} {
		if m, err := read(); err == nil {
			for k, v := range m {
				p.retired[k] += v
			}
		}
	}
	if err := g.dp.Close(); err != nil {
		e.log.Warn("unpinning an adopted datapath", "dir", g.dir, "err", err)
	}
	g.lock.Close()
	delete(p.gens, g.dir)
	if p.own == "" {
		os.Remove(p.dir) // only if empty
	}
	e.log.Info("adopted pairs all over: their datapath is unpinned", "dir", g.dir)
}

// Adopted implements engine.Adopting: the adopted pairs still followed.
func (e *Engine) Adopted() []engine.AdoptedPair {
	p := e.pins
	if p == nil {
		return nil
	}
	p.mu.Lock()
	gens := make([]*adoptedGen, 0, len(p.gens))
	for _, g := range p.gens {
		gens = append(gens, g)
	}
	p.mu.Unlock()
	var out []engine.AdoptedPair
	for _, g := range gens {
		g.mu.Lock()
		for _, ap := range g.pairs {
			out = append(out, engine.AdoptedPair{
				Client: ap.spec.A.Src, Local: ap.spec.A.Dst, Server: ap.spec.B.Src,
				State: ap.p.State(), Bytes: [2]int64{ap.p.Bytes(engine.Up), ap.p.Bytes(engine.Down)}, Adopted: ap.at,
			})
		}
		g.mu.Unlock()
	}
	return out
}

// counters adds the adopted datapaths' counters, live and retired, to out.
func (p *pins) counters(out map[string]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range p.retired {
		out[k] += v
	}
	for _, g := range p.gens {
		for _, read := range []func() (map[string]uint64, error){g.dp.Drops, g.dp.Counters} {
			if m, err := read(); err == nil {
				for k, v := range m {
					out[k] += v
				}
			}
		}
	}
	out["adopted_pairs"] = uint64(p.adopted.Load())
	out["adopted_reset"] = uint64(p.adoptedReset.Load())
}

// closePins ends pinning at engine Close, after the adopted followers
// returned: with leave, the adopted datapaths stay pinned for the next
// process; otherwise they are unpinned (their programs detached). The
// own generation's datapath was already left or closed by the caller.
func (e *Engine) closePins(leave bool) error {
	p := e.pins
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for _, g := range p.gens {
		g.follow.Wait()
		if leave {
			errs = append(errs, g.dp.Leave())
		} else {
			errs = append(errs, g.dp.Close())
		}
		g.lock.Close()
	}
	if p.ownLock != nil {
		p.ownLock.Close()
	}
	os.Remove(p.dir) // only if empty
	return errors.Join(errs...)
}

// stopAdopted tells adopted followers to stop (they read e.followed.stop) and waits.
func (e *Engine) stopAdopted() {
	p := e.pins
	p.mu.Lock()
	p.closed = true
	gens := make([]*adoptedGen, 0, len(p.gens))
	for _, g := range p.gens {
		gens = append(gens, g)
	}
	p.mu.Unlock()
	for _, g := range gens {
		g.follow.Wait()
	}
}

// The pair table: inserting, updating, reading and deleting a pair's two directional entries (tuples: tuple.go; specs: spec.go; stats: stats.go).

package datapath

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/engine"
)

// pair is the control-plane record of a spliced pair: its two flow keys
// and its slots, 112 bytes. The rest of its spec is in its entries,
// which Spec reads back.
type pair struct {
	ka, kb       spliceSpliceKey
	n            uint32 // slots 2n (Up) and 2n+1 (Down)
	nextA, nextB *pair  // chains of pairIndex
}

// a and b are the pair's tuples.
func (p *pair) a() Tuple { return tupleFromKey(p.ka) }
func (p *pair) b() Tuple { return tupleFromKey(p.kb) }

func (p *pair) slot(d engine.Direction) uint32 { return 2*p.n + uint32(d) }

// slotAlloc hands out pair numbers. A freed number is reused only after
// quarantine, so that a program run that looked the old flow up just
// before deletion cannot write into the new pair's entries.
type slotAlloc struct {
	max  uint32
	next uint32 // first never-used number
	free []freed
}

type freed struct {
	n  uint32
	at time.Time
}

const quarantine = time.Second

func (a *slotAlloc) get(now time.Time) (uint32, bool) {
	if a.next < a.max {
		a.next++
		return a.next - 1, true
	}
	if len(a.free) > 0 && now.Sub(a.free[0].at) >= quarantine {
		n := a.free[0].n
		a.free = a.free[1:]
		return n, true
	}
	return 0, false
}

func (a *slotAlloc) put(n uint32, now time.Time) { a.free = append(a.free, freed{n, now}) }

// ErrNotFound is returned for a pair the datapath does not hold.
var ErrNotFound = errors.New("engine ip: pair not spliced")

// ErrFull is returned by Insert when Options.MaxPairs pairs are spliced.
var ErrFull = errors.New("engine ip: pair table full")

// entry returns the mmapped directional entry in slot s. Fields the
// program writes are read with atomics.
func (d *Datapath) entry(s uint32) *spliceSpliceDir {
	return (*spliceSpliceDir)(unsafe.Pointer(&d.dirs[int(s)*dirSize]))
}

// Insert splices a pair: it writes both directional entries, then makes
// the two flows visible to the program. From then on every packet of A and
// B that reaches an attached device is the datapath's.
func (d *Datapath) Insert(spec PairSpec) error {
	spec, p, err := newPair(spec)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.adopted {
		return errors.New("engine ip: an adopted datapath takes no new pairs")
	}
	d.supersedeEnded(p)
	if d.index.a(p.ka) != nil || d.index.b(p.ka) != nil || d.index.a(p.kb) != nil || d.index.b(p.kb) != nil {
		return fmt.Errorf("engine ip: insert %v: a tuple is already spliced", spec.A)
	}
	n, ok := d.slots.get(time.Now())
	if !ok {
		return ErrFull
	}
	p.n = n
	now := uint32(uint64(Now()) >> timeShift)
	*d.entry(p.slot(engine.Up)) = newEntry(spec.B.Reverse(), spec.IfindexB, spec.Up, now, spec.Keep)
	*d.entry(p.slot(engine.Down)) = newEntry(spec.A.Reverse(), spec.IfindexA, spec.Down, now, spec.Keep)
	d.kept.register(p)

	if err := d.insertFlows(p); err != nil {
		d.kept.unregister(p)
		d.slots.put(n, time.Now())
		return err
	}
	d.index.add(p)
	d.onTable(p, true)
	return nil
}

// supersedeEnded removes the pairs that have a tuple of spec and that
// their client is done with (senderDone of their Up direction: the pair
// is in TIME_WAIT or reset, or both sides sent their FIN and the client's
// was acknowledged): a new
// connection took the tuple, as a SYN takes a kernel TIME_WAIT's 4-tuple.
// The client's SYN on such a pair's A tuple goes to the stack (the
// program's reopen), and the listener's connection may be spliced before
// the sweep removes the old pair, or, for a pair that never saw its own
// end, ever would; its flows would otherwise keep the new pair out of the
// table. A pair whose client may still send is left to Insert to refuse.
func (d *Datapath) supersedeEnded(p *pair) {
	for _, k := range []spliceSpliceKey{p.ka, p.kb} {
		for _, old := range []*pair{d.index.a(k), d.index.b(k)} {
			if old != nil && senderDone(atomic.LoadUint32(&d.entry(old.slot(engine.Up)).Flags),
				atomic.LoadUint32(&d.entry(old.slot(engine.Down)).Flags)) {
				d.remove(old)
			}
		}
	}
}

// senderDone mirrors the program's sender_done: the sender of a direction
// with these flags (peer: the other direction's) is done with its pair,
// which ended (both FINs acknowledged, or reset: set on both directions),
// or where both sides sent their FIN and the sender's was acknowledged; a
// SYN from it opens a new connection. One whose FIN was acknowledged
// while the other side still sends is still receiving.
func senderDone(flags, peer uint32) bool {
	const done = flagFINSeen | flagFINAcked
	return flags&(flagTimeWait|flagClosed) != 0 || (flags&done == done && peer&flagFINSeen != 0)
}

// onTable tells Options.OnTable that p entered or left the table.
func (d *Datapath) onTable(p *pair, in bool) {
	if d.opts.OnTable != nil {
		d.opts.OnTable(p.b(), in)
	}
}

// insertFlows adds both flows of p to splice_flows in one batch (one
// system call instead of two), or one at a time where the kernel has no
// batch operations (before Linux 5.6). A failure leaves neither. A batch
// takes no BPF_NOEXIST; none is needed: only the control plane adds
// flows, under d.mu, having checked that neither tuple is spliced.
func (d *Datapath) insertFlows(p *pair) error {
	keys := []spliceSpliceKey{p.kb, p.ka}
	slots := []uint32{p.slot(engine.Down), p.slot(engine.Up)}
	tuples := []Tuple{p.b(), p.a()}
	n, err := d.objs.SpliceFlows.BatchUpdate(keys, slots, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for n = 0; n < len(keys); n++ {
			if err = d.objs.SpliceFlows.Update(&keys[n], slots[n], ebpf.UpdateNoExist); err != nil {
				break
			}
		}
	}
	if err == nil {
		return nil
	}
	// Roll back what went in so no half-inserted pair stays visible.
	for i := range min(n, len(keys)) {
		d.objs.SpliceFlows.Delete(&keys[i])
	}
	return fmt.Errorf("engine ip: insert flow %v: %w", tuples[min(n, len(keys)-1)], err)
}

// newPair checks spec and returns it with IPv4-mapped addresses unmapped,
// and the pair's record.
func newPair(spec PairSpec) (PairSpec, *pair, error) {
	spec.A, spec.B = spec.A.unmapped(), spec.B.unmapped()
	ka, err := spec.A.key()
	if err != nil {
		return spec, nil, fmt.Errorf("engine ip: connection A: %w", err)
	}
	kb, err := spec.B.key()
	if err != nil {
		return spec, nil, fmt.Errorf("engine ip: connection B: %w", err)
	}
	if ka.Family != kb.Family {
		return spec, nil, fmt.Errorf("engine ip: A %v and B %v are different address families", spec.A, spec.B)
	}
	if spec.A == spec.B || spec.A == spec.B.Reverse() {
		return spec, nil, fmt.Errorf("engine ip: A and B are the same connection %v", spec.A)
	}
	if spec.IfindexA <= 0 || spec.IfindexB <= 0 {
		return spec, nil, fmt.Errorf("engine ip: pair %v: device indexes %d/%d", spec.A, spec.IfindexA, spec.IfindexB)
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		if err := spec.Dir(dir).validate(); err != nil {
			return spec, nil, fmt.Errorf("engine ip: pair %v %v: %w", spec.A, dir, err)
		}
	}
	return spec, &pair{ka: ka, kb: kb}, nil
}

// newEntry builds the entry that rewrites packets into out (the output
// tuple as it will travel: forwarder -> peer), keeping every segment if
// keep.
func newEntry(out Tuple, ifindex int, s DirSpec, now uint32, keep bool) spliceSpliceDir {
	k, _ := out.key() // validated by newPair
	var flags uint32
	if keep {
		flags = flagKeep
	}
	return spliceSpliceDir{
		Flags:      flags,
		OutSaddr:   k.Saddr,
		OutDaddr:   k.Daddr,
		OutSport:   k.Sport,
		OutDport:   k.Dport,
		OutIfindex: uint32(ifindex),
		SeqOff:     s.SeqOff,
		TsOff:      s.TSOff,
		Ctl:        s.ctl(),
		LimitSeq:   s.LimitSeq,
		SndNxt:     s.SndNxt,
		AckHi:      s.AckHi,
		WndEdge:    s.wndEdgeSeed(),
		WndMax:     s.wndMaxSeed(),
		TsLast:     s.TSLast,
		LastSeen:   now,
	}
}

// Update replaces the translation of a pair whose two directions are both
// in engine.Hold, or still keeping (PairSpec.Keep): offsets, window
// shifts, options, devices, modes and the tracked starting points. The
// modes are written last, so a spec with Mode engine.Forward publishes
// the rest atomically. Tuples cannot change. With spec.Keep the program
// goes on keeping every segment until StopKeeping, so the caller can
// count what it kept meanwhile (and Update again); without, any keeping
// ends with the modes (the kept segments stay in Kept).
func (d *Datapath) Update(spec PairSpec) error {
	nspec, np, err := newPair(spec)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(nspec.A)
	if err != nil {
		return err
	}
	if p.kb != np.kb {
		return fmt.Errorf("engine ip: update %v: connection B changed from %v to %v", spec.A, p.b(), nspec.B)
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		if err := d.updatable(p, dir); err != nil {
			return err
		}
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		d.writeDir(p, dir, nspec.Dir(dir), nspec.ifindex(dir))
	}
	// Modes last: the program reads the rest only once a mode is not hold.
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		atomic.StoreUint32(&d.entry(p.slot(dir)).Ctl, nspec.Dir(dir).ctl())
	}
	if !nspec.Keep {
		for _, dir := range []engine.Direction{engine.Up, engine.Down} {
			atomic.AndUint32(&d.entry(p.slot(dir)).Flags, ^flagKeep)
		}
	}
	return nil
}

// UpdateDir replaces direction dir of pair a as Update does both, while
// that direction still keeps (or is in hold): for a caller that stopped
// the keeping of the other direction already, whose tracked state must
// not be written over.
func (d *Datapath) UpdateDir(a Tuple, dir engine.Direction, s DirSpec) error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("engine ip: pair %v %v: %w", a, dir, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return err
	}
	if err := d.updatable(p, dir); err != nil {
		return err
	}
	d.writeDir(p, dir, s, int(atomic.LoadUint32(&d.entry(p.slot(dir)).OutIfindex)))
	atomic.StoreUint32(&d.entry(p.slot(dir)).Ctl, s.ctl())
	return nil
}

// updatable refuses a direction that forwards: rewriting it would lose
// what the program tracked.
func (d *Datapath) updatable(p *pair, dir engine.Direction) error {
	e := d.entry(p.slot(dir))
	m := engine.Mode(atomic.LoadUint32(&e.Ctl) & ctlMask)
	if m != engine.Hold && atomic.LoadUint32(&e.Flags)&flagKeep == 0 {
		return fmt.Errorf("engine ip: update %v: direction %v is in mode %v, neither hold nor keeping", p.a(), dir, m)
	}
	return nil
}

// writeDir writes everything of a direction but its mode.
func (d *Datapath) writeDir(p *pair, dir engine.Direction, s DirSpec, ifindex int) {
	e := d.entry(p.slot(dir))
	atomic.StoreUint32(&e.OutIfindex, uint32(ifindex))
	atomic.StoreUint32(&e.SeqOff, s.SeqOff)
	atomic.StoreUint32(&e.TsOff, s.TSOff)
	atomic.StoreUint32(&e.LimitSeq, s.LimitSeq)
	atomic.StoreUint32(&e.SndNxt, s.SndNxt)
	atomic.StoreUint32(&e.AckHi, s.AckHi)
	// A new seed, which the next ACK forwarded replaces (not only raises).
	atomic.StoreUint32(&e.WndEdge, s.wndEdgeSeed())
	atomic.StoreUint32(&e.WndMax, s.wndMaxSeed())
	atomic.AndUint32(&e.Flags, ^flagWndSeen)
	if s.TSLast != 0 {
		atomic.StoreUint32(&e.TsLast, s.TSLast)
	}
	if s.FINSeen {
		atomic.OrUint32(&e.Flags, flagFINSeen)
	}
}

// ifindex is the device direction dir's packets leave through.
func (p PairSpec) ifindex(dir engine.Direction) int {
	if dir == engine.Down {
		return p.IfindexA
	}
	return p.IfindexB
}

// SetMode changes what direction dir of pair a does with its data: hold,
// watch, forward, with or without a limit. It re-arms the watch and limit
// events.
func (d *Datapath) SetMode(a Tuple, dir engine.Direction, m DirMode) error {
	if m.Mode > engine.Hold {
		return fmt.Errorf("engine ip: unknown mode %v", m.Mode)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return err
	}
	e := d.entry(p.slot(dir))
	s := dirSpecOf(e)
	s.DirMode = m
	atomic.StoreUint32(&e.LimitSeq, m.LimitSeq)
	atomic.AndUint32(&e.Flags, ^uint32(flagLimitEv|flagWatchEv))
	atomic.StoreUint32(&e.Ctl, s.ctl())
	return nil
}

// Delete removes pair a from the datapath. Packets of its flows then reach
// the local stack again.
func (d *Datapath) Delete(a Tuple) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return err
	}
	return d.remove(p)
}

// Remove deletes pair a like Delete and returns its tracked state as the
// program left it when its flows were deleted (the slots stay allocated
// for a while after). Unsplicing reads it: the data a watch kept while the
// sockets were rebuilt shows in the flags.
func (d *Datapath) Remove(a Tuple) (PairStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return PairStats{}, err
	}
	err = d.remove(p)
	now := Now()
	up, down := p.slot(engine.Up), p.slot(engine.Down)
	return PairStats{
		Phase: phaseOf(atomic.LoadUint32(&d.entry(up).Flags), atomic.LoadUint32(&d.entry(down).Flags)),
		Up:    d.dirStats(up, now),
		Down:  d.dirStats(down, now),
	}, err
}

// RemoveEnded removes the pair whose B tuple is b if ok, given its spec
// and tracked state, says its 4-tuple may serve a new connection (the
// pair ended long enough ago; ok runs under the table's lock, which
// OnTable also holds), and reports whether it did. Once it returns true
// no flow of the pair is in the table: a new connection's SYN-ACK on b
// reaches the stack, and no segment of it is translated as the old
// pair's. The pair's client side goes too (a late FIN of the client's
// then reaches the listener, which resets it), as a kernel TIME_WAIT
// taken over by a new connection ends.
func (d *Datapath) RemoveEnded(b Tuple, ok func(PairSpec, PairStats) bool) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, ErrClosed
	}
	var p *pair
	if k, err := b.key(); err == nil {
		p = d.index.b(k)
	}
	if p == nil {
		return false, fmt.Errorf("%w: %v", ErrNotFound, b)
	}
	now := Now()
	up, down := p.slot(engine.Up), p.slot(engine.Down)
	st := PairStats{
		Phase: phaseOf(atomic.LoadUint32(&d.entry(up).Flags), atomic.LoadUint32(&d.entry(down).Flags)),
		Up:    d.dirStats(up, now),
		Down:  d.dirStats(down, now),
	}
	if st.Phase != PhaseTimeWait && st.Phase != PhaseClosed || !ok(d.spec(p), st) {
		return false, nil
	}
	return true, d.remove(p)
}

func ignoreMissing(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

func (d *Datapath) remove(p *pair) error {
	// A flow the program took out itself (a SYN reopened its tuple) is
	// gone already.
	errA := ignoreMissing(d.objs.SpliceFlows.Delete(&p.ka))
	errB := ignoreMissing(d.objs.SpliceFlows.Delete(&p.kb))
	d.index.remove(p)
	d.onTable(p, false)
	d.kept.unregister(p)
	d.slots.put(p.n, time.Now())
	if errA != nil || errB != nil {
		return fmt.Errorf("engine ip: delete %v: %w", p.a(), errors.Join(errA, errB))
	}
	return nil
}

func (d *Datapath) lookup(a Tuple) (*pair, error) {
	if d.closed {
		return nil, ErrClosed
	}
	p := d.pairOf(a)
	if p == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, a)
	}
	return p, nil
}

// Pairs returns the A tuples of the spliced pairs.
func (d *Datapath) Pairs() []Tuple {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Tuple, 0, d.index.n)
	for _, p := range d.index.all() {
		out = append(out, p.a())
	}
	return out
}

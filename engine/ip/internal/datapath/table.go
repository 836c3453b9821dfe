// The pair table: tuples, pair specs, and inserting, updating, reading and deleting a pair's two directional entries.

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/engine"
)

// Tuple is a TCP 4-tuple as a packet arriving at the forwarder carries it:
// Src is the remote end, Dst the forwarder's own address and port.
type Tuple struct {
	Src, Dst netip.AddrPort
}

// Reverse returns the tuple of packets travelling the other way.
func (t Tuple) Reverse() Tuple { return Tuple{Src: t.Dst, Dst: t.Src} }

func (t Tuple) String() string { return t.Src.String() + "->" + t.Dst.String() }

func (t Tuple) unmapped() Tuple {
	return Tuple{
		Src: netip.AddrPortFrom(t.Src.Addr().Unmap(), t.Src.Port()),
		Dst: netip.AddrPortFrom(t.Dst.Addr().Unmap(), t.Dst.Port()),
	}
}

// key encodes t for the flow map; IPv4-mapped IPv6 addresses count as IPv4,
// as they do on the wire.
func (t Tuple) key() (spliceSpliceKey, error) {
	t = t.unmapped()
	var k spliceSpliceKey
	s, d := t.Src.Addr(), t.Dst.Addr()
	switch {
	case !s.IsValid() || !d.IsValid():
		return k, fmt.Errorf("tuple %v: missing address", t)
	case s.Is4() && d.Is4():
		k.Family = afInet
		a, b := s.As4(), d.As4()
		copy(k.Saddr[:], a[:])
		copy(k.Daddr[:], b[:])
	case s.Is6() && d.Is6():
		k.Family = afInet6
		k.Saddr, k.Daddr = s.As16(), d.As16()
	default:
		return k, fmt.Errorf("tuple %v mixes IPv4 and IPv6", t)
	}
	if t.Src.Port() == 0 || t.Dst.Port() == 0 {
		return k, fmt.Errorf("tuple %v: port 0", t)
	}
	k.Sport, k.Dport = htons(t.Src.Port()), htons(t.Dst.Port())
	return k, nil
}

func tupleFromKey(k spliceSpliceKey) Tuple {
	var s, d netip.Addr
	if k.Family == afInet {
		s, d = netip.AddrFrom4([4]byte(k.Saddr[:4])), netip.AddrFrom4([4]byte(k.Daddr[:4]))
	} else {
		s, d = netip.AddrFrom16(k.Saddr), netip.AddrFrom16(k.Daddr)
	}
	return Tuple{Src: netip.AddrPortFrom(s, ntohs(k.Sport)), Dst: netip.AddrPortFrom(d, ntohs(k.Dport))}
}

// Port fields hold network byte order; the struct is read on little-endian hosts.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
func ntohs(v uint16) uint16 { return htons(v) }

// splice_key.family values, from enum splice_family.
const (
	afInet  = uint8(spliceSpliceFamilySPLICE_AF_INET)
	afInet6 = uint8(spliceSpliceFamilySPLICE_AF_INET6)
)

// PairSpec is what the datapath needs to splice a pair.
type PairSpec struct {
	// A is connection A as its packets arrive at the forwarder: Src is the
	// client, Dst the forwarder's listening address. A identifies the pair.
	A Tuple
	// B is connection B as its packets arrive: Src is the server, Dst the
	// forwarder's local address toward it.
	B Tuple
	// IfindexA and IfindexB are the forwarder's devices toward the client
	// and the server; translated packets leave through them.
	IfindexA, IfindexB int
	// Up translates A -> B (client to server), Down B -> A.
	Up, Down DirSpec
	// Keep (Insert, Update): the program keeps every segment of the pair
	// (Kept), whatever the modes say, until StopKeeping: a pair held with
	// Keep loses nothing while its sockets are frozen and its translation
	// published. Update without Keep ends the keeping.
	Keep bool
}

// Dir returns the spec of direction d.
func (p PairSpec) Dir(d engine.Direction) DirSpec {
	if d == engine.Up {
		return p.Up
	}
	return p.Down
}

// DirSpec is one direction's translation and the tracked state it starts
// from. Sequence numbers are in the sender's space.
type DirSpec struct {
	// SeqOff is added to seq; the other direction subtracts it from ack and
	// SACK edges. Up.SeqOff = B.write_seq - A.rcv_nxt.
	SeqOff uint32
	// TSOff is added to TSval; the other direction subtracts it from TSecr.
	TSOff uint32
	// InShift is the window scale of the windows the sender advertises on
	// its connection (its own wscale); OutShift the scale the receiver
	// applies to windows arriving on the output connection (the
	// forwarder's wscale there). 0 when scaling was not negotiated; at most 14.
	InShift, OutShift uint8
	// StripTS and StripSACK overwrite these options with NOPs, for a
	// receiver that did not negotiate them.
	StripTS, StripSACK bool
	// SndNxt is the sender's next sequence number as far as the forwarder
	// knows (the receiving socket's rcv_nxt plus nothing in flight); the seq
	// guard is centred on it and the other direction's acks may not pass it
	// (plus SeqOff).
	SndNxt uint32
	// AckHi is the sender's latest cumulative ACK (the sending socket's
	// snd_una on the sender's connection).
	AckHi uint32
	// TSLast is the sender's latest TSval, 0 if unknown.
	TSLast uint32
	// FINSeen (Update only): the forwarder already received the sender's
	// FIN, at SndNxt - 1, and the control plane delivers it; the
	// direction counts as having forwarded it, for teardown.
	FINSeen bool
	DirMode
}

// DirMode is what a direction does with its data, changeable while spliced.
type DirMode struct {
	// Mode: engine.Forward translates and forwards; engine.Watch forwards
	// acks but reports data or FIN with an EventWatch and leaves it to the
	// control plane; engine.Hold forwards nothing (offsets being computed).
	Mode engine.Mode
	// Limited makes the direction forward no byte at or past LimitSeq
	// (sender's space, within 2^31 of SndNxt): a segment that would cross
	// it is not forwarded, and EventLimit reports the first byte left for
	// the control plane.
	Limited  bool
	LimitSeq uint32
}

// Short names for the generated constants of bpf/splice.h: translation
// options (enum splice_opt), learnt facts (enum splice_flag), the packing of
// splice_dir.ctl (enum splice_ctl_layout) and of last_seen (enum splice_time).
const (
	optStripTS   = uint32(spliceSpliceOptSPLICE_OPT_STRIP_TS)
	optStripSACK = uint32(spliceSpliceOptSPLICE_OPT_STRIP_SACK)
	optLimit     = uint32(spliceSpliceOptSPLICE_OPT_LIMIT)

	flagFINSeen  = uint32(spliceSpliceFlagSPLICE_F_FIN_SEEN)
	flagFINAcked = uint32(spliceSpliceFlagSPLICE_F_FIN_ACKED)
	flagTimeWait = uint32(spliceSpliceFlagSPLICE_F_TIME_WAIT)
	flagClosed   = uint32(spliceSpliceFlagSPLICE_F_CLOSED)
	flagLimitEv  = uint32(spliceSpliceFlagSPLICE_F_LIMIT_EV)
	flagWatchEv  = uint32(spliceSpliceFlagSPLICE_F_WATCH_EV)
	flagWndSeen  = uint32(spliceSpliceFlagSPLICE_F_WND_SEEN)

	ctlMask        = uint32(spliceSpliceCtlLayoutSPLICE_CTL_FIELD_MASK)
	ctlOptsPos     = uint32(spliceSpliceCtlLayoutSPLICE_CTL_OPTS_POS)
	ctlInShiftPos  = uint32(spliceSpliceCtlLayoutSPLICE_CTL_IN_SHIFT_POS)
	ctlOutShiftPos = uint32(spliceSpliceCtlLayoutSPLICE_CTL_OUT_SHIFT_POS)

	timeShift = uint32(spliceSpliceTimeSPLICE_TIME_SHIFT) // last_seen = ktime >> timeShift
)

func (s DirSpec) ctl() uint32 {
	var opts uint32
	if s.StripTS {
		opts |= optStripTS
	}
	if s.StripSACK {
		opts |= optStripSACK
	}
	if s.Limited {
		opts |= optLimit
	}
	return uint32(s.Mode) | opts<<ctlOptsPos | uint32(s.InShift)<<ctlInShiftPos | uint32(s.OutShift)<<ctlOutShiftPos
}

// wndEdgeSeed is where the right edge of the window the sender offers
// starts (splice_dir.wnd_edge, in the other direction's output space):
// its latest ack plus the widest window its scale can express, an upper
// bound for what it may have advertised, since the control plane does not
// know its latest window. The first ACK the program forwards replaces it.
func (s DirSpec) wndEdgeSeed() uint32 {
	return s.AckHi + 65535<<min(s.InShift, 14)
}

func (s DirSpec) validate() error {
	if s.InShift > 14 || s.OutShift > 14 {
		return fmt.Errorf("window scale %d/%d above 14 (RFC 7323)", s.InShift, s.OutShift)
	}
	if s.Mode > engine.Hold {
		return fmt.Errorf("unknown mode %v", s.Mode)
	}
	return nil
}

// pair is the control-plane record of a spliced pair.
type pair struct {
	spec   PairSpec
	ka, kb spliceSpliceKey
	n      uint32 // slots 2n (Up) and 2n+1 (Down)
}

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
	p, err := newPair(spec)
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
	if d.pairs[p.spec.A] != nil || d.byB[p.spec.A] != nil || d.pairs[p.spec.B] != nil || d.byB[p.spec.B] != nil {
		return fmt.Errorf("engine ip: insert %v: a tuple is already spliced", p.spec.A)
	}
	n, ok := d.slots.get(time.Now())
	if !ok {
		return ErrFull
	}
	p.n = n
	now := uint32(uint64(Now()) >> timeShift)
	*d.entry(p.slot(engine.Up)) = newEntry(p.spec.B.Reverse(), p.spec.IfindexB, p.spec.Up, now, p.spec.Keep)
	*d.entry(p.slot(engine.Down)) = newEntry(p.spec.A.Reverse(), p.spec.IfindexA, p.spec.Down, now, p.spec.Keep)
	d.kept.register(p)

	if err := d.insertFlows(p); err != nil {
		d.kept.unregister(p)
		d.slots.put(n, time.Now())
		return err
	}
	d.pairs[p.spec.A] = p
	d.byB[p.spec.B] = p
	d.onTable(p, true)
	return nil
}

// onTable tells Options.OnTable that p entered or left the table.
func (d *Datapath) onTable(p *pair, in bool) {
	if d.opts.OnTable != nil {
		d.opts.OnTable(p.spec.B, in)
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
	tuples := []Tuple{p.spec.B, p.spec.A}
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

func newPair(spec PairSpec) (*pair, error) {
	spec.A, spec.B = spec.A.unmapped(), spec.B.unmapped()
	ka, err := spec.A.key()
	if err != nil {
		return nil, fmt.Errorf("engine ip: connection A: %w", err)
	}
	kb, err := spec.B.key()
	if err != nil {
		return nil, fmt.Errorf("engine ip: connection B: %w", err)
	}
	if ka.Family != kb.Family {
		return nil, fmt.Errorf("engine ip: A %v and B %v are different address families", spec.A, spec.B)
	}
	if spec.A == spec.B || spec.A == spec.B.Reverse() {
		return nil, fmt.Errorf("engine ip: A and B are the same connection %v", spec.A)
	}
	if spec.IfindexA <= 0 || spec.IfindexB <= 0 {
		return nil, fmt.Errorf("engine ip: pair %v: device indexes %d/%d", spec.A, spec.IfindexA, spec.IfindexB)
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		if err := spec.Dir(dir).validate(); err != nil {
			return nil, fmt.Errorf("engine ip: pair %v %v: %w", spec.A, dir, err)
		}
	}
	return &pair{spec: spec, ka: ka, kb: kb}, nil
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
	np, err := newPair(spec)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(np.spec.A)
	if err != nil {
		return err
	}
	if p.spec.B != np.spec.B {
		return fmt.Errorf("engine ip: update %v: connection B changed from %v to %v", spec.A, p.spec.B, np.spec.B)
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		if err := d.updatable(p, dir); err != nil {
			return err
		}
	}
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		d.writeDir(p, dir, np.spec.Dir(dir), np.spec.ifindex(dir))
	}
	// Modes last: the program reads the rest only once a mode is not hold.
	for _, dir := range []engine.Direction{engine.Up, engine.Down} {
		atomic.StoreUint32(&d.entry(p.slot(dir)).Ctl, np.spec.Dir(dir).ctl())
	}
	if !np.spec.Keep {
		for _, dir := range []engine.Direction{engine.Up, engine.Down} {
			atomic.AndUint32(&d.entry(p.slot(dir)).Flags, ^flagKeep)
		}
	}
	p.spec = np.spec
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
	d.writeDir(p, dir, s, p.spec.ifindex(dir))
	atomic.StoreUint32(&d.entry(p.slot(dir)).Ctl, s.ctl())
	if dir == engine.Up {
		p.spec.Up = s
	} else {
		p.spec.Down = s
	}
	return nil
}

// updatable refuses a direction that forwards: rewriting it would lose
// what the program tracked.
func (d *Datapath) updatable(p *pair, dir engine.Direction) error {
	e := d.entry(p.slot(dir))
	m := engine.Mode(atomic.LoadUint32(&e.Ctl) & ctlMask)
	if m != engine.Hold && atomic.LoadUint32(&e.Flags)&flagKeep == 0 {
		return fmt.Errorf("engine ip: update %v: direction %v is in mode %v, neither hold nor keeping", p.spec.A, dir, m)
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
	s := p.spec.Dir(dir)
	s.DirMode = m
	e := d.entry(p.slot(dir))
	atomic.StoreUint32(&e.LimitSeq, m.LimitSeq)
	atomic.AndUint32(&e.Flags, ^uint32(flagLimitEv|flagWatchEv))
	atomic.StoreUint32(&e.Ctl, s.ctl())
	if dir == engine.Up {
		p.spec.Up = s
	} else {
		p.spec.Down = s
	}
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
	delete(d.pairs, p.spec.A)
	delete(d.byB, p.spec.B)
	d.onTable(p, false)
	d.kept.unregister(p)
	d.slots.put(p.n, time.Now())
	if errA != nil || errB != nil {
		return fmt.Errorf("engine ip: delete %v: %w", p.spec.A, errors.Join(errA, errB))
	}
	return nil
}

func (d *Datapath) lookup(a Tuple) (*pair, error) {
	if d.closed {
		return nil, ErrClosed
	}
	p := d.pairs[a.unmapped()]
	if p == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, a)
	}
	return p, nil
}

// Pairs returns the A tuples of the spliced pairs.
func (d *Datapath) Pairs() []Tuple {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Tuple, 0, len(d.pairs))
	for a := range d.pairs {
		out = append(out, a)
	}
	return out
}

// Phase is where a pair is in the teardown of SpliceNP 2.2.
type Phase uint8

const (
	// PhaseSpliced: no FIN yet.
	PhaseSpliced Phase = iota
	// PhaseFINRelayed1: one direction forwarded its FIN.
	PhaseFINRelayed1
	// PhaseACKRelayed1: that FIN was acknowledged.
	PhaseACKRelayed1
	// PhaseFINRelayed2: both directions forwarded a FIN.
	PhaseFINRelayed2
	// PhaseTimeWait: both FINs acknowledged; Sweep removes the pair after
	// Options.TimeWait.
	PhaseTimeWait
	// PhaseClosed: a reset ended the pair; the next Sweep removes it.
	PhaseClosed
)

func (p Phase) String() string {
	switch p {
	case PhaseSpliced:
		return "spliced"
	case PhaseFINRelayed1:
		return "fin_relayed1"
	case PhaseACKRelayed1:
		return "ack_relayed1"
	case PhaseFINRelayed2:
		return "fin_relayed2"
	case PhaseTimeWait:
		return "time_wait"
	case PhaseClosed:
		return "closed"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

func phaseOf(up, down uint32) Phase {
	all := up | down
	switch {
	case all&flagClosed != 0:
		return PhaseClosed
	case all&flagTimeWait != 0:
		return PhaseTimeWait
	}
	fins := 0
	acked := false
	for _, f := range []uint32{up, down} {
		if f&flagFINSeen != 0 {
			fins++
			acked = acked || f&flagFINAcked != 0
		}
	}
	switch {
	case fins == 2:
		return PhaseFINRelayed2
	case fins == 1 && acked:
		return PhaseACKRelayed1
	case fins == 1:
		return PhaseFINRelayed1
	}
	return PhaseSpliced
}

// PairStats is a pair's tracked state as the program last left it.
type PairStats struct {
	Phase    Phase
	Up, Down DirStats
}

// Dir returns the stats of direction d.
func (s PairStats) Dir(d engine.Direction) DirStats {
	if d == engine.Up {
		return s.Up
	}
	return s.Down
}

// DirStats is one direction's tracked state. Sequence numbers are in the
// sender's space.
type DirStats struct {
	DirMode
	// SndNxt is the highest seq + len (+1 for FIN) forwarded.
	SndNxt uint32
	// AckHi is the highest ack forwarded (it acknowledges the other
	// direction's output).
	AckHi uint32
	// TSLast is the sender's latest TSval, 0 if none seen.
	TSLast uint32
	// Window is the last raw window field forwarded, before rescaling.
	Window uint16
	// WindowEdge is the right edge of the window the sender offered (its
	// ack plus its window, scaled by its shift), in the other direction's
	// output space, as AckHi: the highest forwarded, or the control
	// plane's seed (AckHi + 65535 << InShift) until the first ACK. The
	// other direction drops data or a FIN that starts past it.
	WindowEdge uint32
	// Bytes counts stream bytes forwarded (retransmissions once); Packets
	// every packet forwarded.
	Bytes, Packets uint64
	// LastSeen is when the direction last forwarded a packet, on the clock
	// of Now (1 ms resolution).
	LastSeen time.Duration
	// FIN: the direction forwarded its FIN; FINAcked: it was acknowledged.
	FIN, FINAcked bool
	// LimitReached and Watched: the limit or watch event fired.
	LimitReached, Watched bool
	// Kept counts the segments the program kept (modulo 2^22); Keeping:
	// it keeps every segment (PairSpec.Keep); Released: it hands what it
	// would keep to the stack (Release).
	Kept              uint32
	Keeping, Released bool
}

// Lookup returns the tracked state of pair a, for /flows and for
// unsplicing.
func (d *Datapath) Lookup(a Tuple) (PairStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return PairStats{}, err
	}
	now := Now()
	up, down := d.dirStats(p.slot(engine.Up), now), d.dirStats(p.slot(engine.Down), now)
	return PairStats{
		Phase: phaseOf(atomic.LoadUint32(&d.entry(p.slot(engine.Up)).Flags), atomic.LoadUint32(&d.entry(p.slot(engine.Down)).Flags)),
		Up:    up,
		Down:  down,
	}, nil
}

func (d *Datapath) dirStats(s uint32, now time.Duration) DirStats {
	e := d.entry(s)
	ctl := atomic.LoadUint32(&e.Ctl)
	flags := atomic.LoadUint32(&e.Flags)
	return DirStats{
		DirMode: DirMode{
			Mode:     engine.Mode(ctl & ctlMask),
			Limited:  (ctl>>ctlOptsPos)&optLimit != 0,
			LimitSeq: atomic.LoadUint32(&e.LimitSeq),
		},
		SndNxt:     atomic.LoadUint32(&e.SndNxt),
		AckHi:      atomic.LoadUint32(&e.AckHi),
		WindowEdge: atomic.LoadUint32(&e.WndEdge),
		TSLast:     atomic.LoadUint32(&e.TsLast),
		// Win shares a 32-bit word with padding; its low half on little-endian.
		Window:       uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&e.Win)))),
		Bytes:        atomic.LoadUint64(&e.Bytes),
		Packets:      atomic.LoadUint64(&e.Packets),
		LastSeen:     now - age(atomic.LoadUint32(&e.LastSeen), now),
		FIN:          flags&flagFINSeen != 0,
		FINAcked:     flags&flagFINAcked != 0,
		LimitReached: flags&flagLimitEv != 0,
		Watched:      flags&flagWatchEv != 0,
		Kept:         keptCount(flags),
		Keeping:      flags&flagKeep != 0,
		Released:     flags&flagPass != 0,
	}
}

// age is how long before now a last_seen stamp was taken. Stamps are 32
// bits of 2^20 ns, so ages up to 26 days are exact; a stamp from the
// future (the program's coarse clock ran ahead of a caller's now) is age 0.
func age(stamp uint32, now time.Duration) time.Duration {
	d := int32(uint32(uint64(now)>>timeShift) - stamp)
	if d < 0 {
		return 0
	}
	return time.Duration(d) << timeShift
}

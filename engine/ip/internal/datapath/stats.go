// Reading a pair back: its teardown phase, and each direction's counters and state as PairStats.

package datapath

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/splicer/splicer/engine"
)

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
	// MaxWindow is the largest window the sender advertised, in bytes
	// (scaled by its shift), or the control plane's seed (65535 <<
	// InShift) until the first ACK. It bounds, at no less than 65535,
	// how far the other direction's seq may lie from its SndNxt and how
	// far this direction's acks may lag behind AckHi.
	MaxWindow uint32
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
		MaxWindow:  atomic.LoadUint32(&e.WndMax),
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

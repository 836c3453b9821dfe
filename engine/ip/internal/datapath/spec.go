// What a pair is spliced with: PairSpec and its two DirSpecs (sequence and timestamp offsets, windows, limits, modes), as the program's entries encode them.

package datapath

import (
	"fmt"

	"github.com/splicer/splicer/engine"
)

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
	return s.AckHi + s.wndMaxSeed()
}

// wndMaxSeed is where the largest window the sender advertised
// (splice_dir.wnd_max) starts: the widest its scale can express, for the
// same reason; the first ACK the program forwards replaces it, and from
// then on it bounds the other direction's seq guard and this one's old
// acks by windows the sender really advertised.
func (s DirSpec) wndMaxSeed() uint32 {
	return 65535 << min(s.InShift, 14)
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

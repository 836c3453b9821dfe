// Test helper: a pure-Go reference of the datapath: the same checks, translation and tracking on raw frames, with checksums recomputed from scratch.

package datapath

import (
	"encoding/binary"
	"net/netip"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// Verdicts as the program returns them (tc action codes).
const (
	verdictPass     int32 = -1 // TC_ACT_UNSPEC: not ours, or a released direction's segment for the stack
	verdictDrop     int32 = 2  // TC_ACT_SHOT
	verdictKept     int32 = 2  // TC_ACT_SHOT too (tcx has no "stolen"), counted as kept
	verdictRedirect int32 = 7  // TC_ACT_REDIRECT
)

// refDir mirrors struct splice_dir.
type refDir struct {
	out                   Tuple
	ifindex               int
	seqOff, tsOff         uint32
	mode                  engine.Mode
	stripTS, stripSACK    bool
	limited               bool
	inShift, outShift     uint8
	limitSeq              uint32
	flags                 uint32
	sndNxt, ackHi, tsLast uint32
	wndEdge               uint32 // right edge of the window the sender offers, in the peer's output space
	wndMax                uint32 // the largest window the sender advertised, in bytes
	win                   uint16
	bytes, packets        uint64
}

type refEvent struct {
	kind EventKind
	seq  uint32
	flow Tuple
}

// refKept is one record the program writes into the kept ring.
type refKept struct {
	flow   Tuple
	seq    uint32
	data   []byte
	header []byte
	last   bool
}

// refModel is the reference datapath: flows to slots, slots to entries.
type refModel struct {
	flows  map[Tuple]int
	dirs   map[int]*refDir
	drops  map[string]uint64
	events []refEvent
	mtu    int // the peer devices' MTU; 0: not checked
	// kept are the kept ring's records; chunk the payload bytes per
	// record (the program's kept_chunk); nKept and nPassed the counters.
	kept           []refKept
	chunk          int
	nKept, nPassed uint64
}

func newRefModel() *refModel {
	return &refModel{flows: map[Tuple]int{}, dirs: map[int]*refDir{}, drops: map[string]uint64{}, chunk: keptChunkMax}
}

// keptChunkMax is SPLICE_KEPT_CHUNK.
var keptChunkMax = len(spliceSpliceKept{}.Data)

func refDirFrom(out Tuple, ifindex int, s DirSpec) *refDir {
	return &refDir{
		out: out, ifindex: ifindex, seqOff: s.SeqOff, tsOff: s.TSOff, mode: s.Mode,
		stripTS: s.StripTS, stripSACK: s.StripSACK, limited: s.Limited,
		inShift: s.InShift, outShift: s.OutShift, limitSeq: s.LimitSeq,
		sndNxt: s.SndNxt, ackHi: s.AckHi, tsLast: s.TSLast,
		// The widest window the sender's scale can express, until its
		// first ACK.
		wndEdge: s.AckHi + 65535<<min(s.InShift, 14),
		wndMax:  65535 << min(s.InShift, 14),
	}
}

// noteWindow mirrors note_window: the first ACK's edge and window
// replace the seeds, later ones only raise them.
func (e *refDir) noteWindow(ack uint32, win uint16) {
	wnd := uint32(win) << min(e.inShift, 14)
	edge := ack + wnd
	if e.flags&flagWndSeen == 0 {
		e.flags |= flagWndSeen
		e.wndEdge = edge
		e.wndMax = wnd
		return
	}
	if after(edge, e.wndEdge) {
		e.wndEdge = edge
	}
	e.wndMax = max(e.wndMax, wnd)
}

// maxWindow mirrors max_window: the largest window the sender advertised,
// at least 65535 (SPLICE_WND_FLOOR).
func (e *refDir) maxWindow() uint32 { return max(e.wndMax, 65535) }

// seqBound mirrors seq_bound: how far a segment may lie from its sender's
// next byte, given the receiver's direction peer.
func seqBound(peer *refDir) uint32 { return min(peer.maxWindow(), span(peer.outShift)) }

// insert mirrors Datapath.Insert for pair number n.
func (m *refModel) insert(spec PairSpec, n int) {
	m.flows[spec.A.unmapped()] = 2 * n
	m.flows[spec.B.unmapped()] = 2*n + 1
	m.dirs[2*n] = refDirFrom(spec.B.Reverse().unmapped(), spec.IfindexB, spec.Up)
	m.dirs[2*n+1] = refDirFrom(spec.A.Reverse().unmapped(), spec.IfindexA, spec.Down)
	if spec.Keep {
		m.dirs[2*n].flags |= flagKeep
		m.dirs[2*n+1].flags |= flagKeep
	}
}

// keep mirrors keep() in splice.c, serially: a released direction passes
// the segment to the stack; otherwise it is counted and written into the
// kept ring, one record per chunk of payload.
func (m *refModel) keep(e *refDir, flow Tuple, seq uint32, h, payload []byte) int32 {
	if e.flags&flagPass != 0 {
		m.nPassed++
		return verdictPass
	}
	e.flags = e.flags&^flagKeptMask | (e.flags+flagKeptOne)&flagKeptMask
	for off := 0; ; {
		n := min(m.chunk, len(payload)-off)
		m.kept = append(m.kept, refKept{flow: flow, seq: seq + uint32(off), data: payload[off : off+n], header: append([]byte(nil), h...), last: off+n == len(payload)})
		off += n
		if off == len(payload) {
			break
		}
	}
	m.nKept++
	return verdictKept
}

func after(a, b uint32) bool { return int32(a-b) > 0 }

func span(shift uint8) uint32 { return 65536 << min(shift, 14) }

func rescale(w uint16, in, out uint8) uint16 {
	v := uint64(w) << min(in, 14) >> min(out, 14)
	return uint16(min(v, 0xffff))
}

// refOpts mirrors parse_opts: positions of the timestamp and SACK options.
type refOpts struct{ ts, sack, sackLen int }

func parseOptsRef(h []byte) (refOpts, bool) {
	var o refOpts
	i := 20
	for n := 0; n < 40 && i < len(h); n++ {
		kind := h[i]
		if kind == 0 {
			break
		}
		if kind == 1 {
			i++
			continue
		}
		l := 0
		if i+1 < len(h) {
			l = int(h[i+1])
		}
		if l < 2 || i+l > len(h) {
			return o, false
		}
		switch kind {
		case 8:
			if l != 10 || o.ts != 0 {
				return o, false
			}
			o.ts = i
		case 5:
			if l < 10 || l > 34 || (l-2)%8 != 0 || o.sack != 0 {
				return o, false
			}
			o.sack, o.sackLen = i, l
		}
		i += l
	}
	return o, true
}

func (m *refModel) drop(why string) (int32, []byte) {
	m.drops[why]++
	return verdictDrop, nil
}

// run processes one frame arriving on device ifindex as the program
// would: the verdict and, for a redirect, the translated frame with
// checksums recomputed from scratch.
func (m *refModel) run(frame []byte, ifindex int) (int32, []byte) {
	f := append([]byte(nil), frame...)
	if len(f) < packet.EthLen {
		return verdictPass, nil
	}
	var flow Tuple
	var l4, end int
	frag, ext := false, false
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		if len(f) < packet.EthLen+20 {
			return verdictPass, nil
		}
		ihl := int(f[packet.EthLen] & 0xf)
		if f[packet.EthLen]>>4 != 4 || ihl < 5 || f[packet.EthLen+9] != 6 {
			return verdictPass, nil
		}
		fo := binary.BigEndian.Uint16(f[packet.EthLen+6:])
		if fo&0x1fff != 0 {
			return verdictPass, nil
		}
		frag = fo&0x2000 != 0
		l4 = packet.EthLen + ihl*4
		end = packet.EthLen + int(binary.BigEndian.Uint16(f[packet.EthLen+2:]))
		flow.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[packet.EthLen+12:])), 0)
		flow.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[packet.EthLen+16:])), 0)
	case 0x86dd:
		if len(f) < packet.EthLen+40 {
			return verdictPass, nil
		}
		if f[packet.EthLen]>>4 != 6 {
			return verdictPass, nil
		}
		var walk int
		l4, walk = walkExt6(f, f[packet.EthLen+6])
		switch walk {
		case walkNotOurs:
			return verdictPass, nil
		case walkLongChain:
			return m.drop("ipv6_ext_chain")
		}
		ext = l4 > packet.EthLen+40
		frag = walk == walkFragment
		end = packet.EthLen + 40 + int(binary.BigEndian.Uint16(f[packet.EthLen+4:]))
		flow.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[packet.EthLen+8:])), 0)
		flow.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[packet.EthLen+24:])), 0)
	default:
		return verdictPass, nil
	}
	if len(f) < l4+4 {
		return verdictPass, nil
	}
	flow.Src = netip.AddrPortFrom(flow.Src.Addr(), binary.BigEndian.Uint16(f[l4:]))
	flow.Dst = netip.AddrPortFrom(flow.Dst.Addr(), binary.BigEndian.Uint16(f[l4+2:]))
	slot, ok := m.flows[flow]
	if !ok {
		return verdictPass, nil
	}
	e, peer := m.dirs[slot], m.dirs[slot^1]
	if e == nil || peer == nil {
		return m.drop("no_entry")
	}
	// Only from the device toward the sender: where the peer direction's
	// packets leave.
	if ifindex != peer.ifindex {
		return m.drop("wrong_device")
	}
	if frag {
		return m.drop("fragment")
	}
	if ext {
		return m.drop("ipv6_ext_header")
	}
	if end > len(f) || end < l4+20 {
		return m.drop("malformed")
	}
	hlen := int(f[l4+12]>>4) * 4
	if hlen < 20 || l4+hlen > end {
		return m.drop("malformed")
	}
	h := f[l4 : l4+hlen]
	o, ok := parseOptsRef(h)
	if !ok {
		return m.drop("malformed")
	}
	seq := binary.BigEndian.Uint32(h[4:])
	ack := binary.BigEndian.Uint32(h[8:])
	flags := h[13]
	win := binary.BigEndian.Uint16(h[14:])
	plen := uint32(end - l4 - hlen)
	var tsval uint32
	if o.ts != 0 {
		tsval = binary.BigEndian.Uint32(h[o.ts+2:])
	}
	sp := seqBound(peer)
	dseq := int32(seq - e.sndNxt)
	seqOK := dseq <= int32(sp) && dseq >= -int32(sp)
	noteTS := func() {
		if o.ts != 0 && (e.tsLast == 0 || after(tsval, e.tsLast)) {
			e.tsLast = tsval
		}
	}

	if flags&(packet.SYN|packet.ACK) == packet.SYN && senderDone(e.flags, peer.flags) {
		delete(m.flows, flow) // a new connection on the tuple of a pair its sender is done with
		return verdictPass, nil
	}
	if e.flags&flagClosed != 0 {
		return m.drop("closed")
	}
	if flags&(packet.SYN|packet.ACK|packet.RST|packet.FIN) == packet.SYN|packet.ACK && plen == 0 && seq+1 == e.sndNxt {
		return answerSynAck(f, l4, h, seq, e, peer)
	}
	if flags&packet.SYN != 0 {
		return m.drop("syn_on_spliced")
	}
	if flags&(packet.ACK|packet.RST) == 0 {
		return m.drop("no_ack")
	}
	body := f[l4+hlen : end]
	if e.mode == engine.Hold || e.flags&flagKeep != 0 {
		if seqOK {
			noteTS()
		}
		if e.flags&(flagKeep|flagPass) == 0 {
			return m.drop("hold")
		}
		return m.keep(e, flow, seq, h, body), nil
	}
	if !seqOK {
		return m.drop("seq_out_of_window")
	}
	if flags&packet.ACK != 0 {
		dack := int32(ack - (peer.sndNxt + peer.seqOff))
		if dack > 0 || dack < -int32(span(max(e.inShift, e.outShift))) {
			return m.drop("ack_out_of_window")
		}
		// RFC 5961 5.2: no older than the highest ack by more than the
		// sender's largest window.
		if after(e.ackHi-e.maxWindow(), ack) {
			return m.drop("ack_out_of_window")
		}
	}
	fin := uint32(0)
	if flags&packet.FIN != 0 {
		fin = 1
	}
	// Data or a FIN starting past the receiver's window (its ack plus its
	// window) is dropped before it moves anything.
	if (plen > 0 || fin == 1) && flags&packet.RST == 0 && after(seq, peer.wndEdge-e.seqOff) {
		return m.drop("seq_out_of_window")
	}
	// A FIN behind the sender's next byte is forged, unless it is the
	// FIN already forwarded, again.
	if fin == 1 && flags&packet.RST == 0 && after(e.sndNxt, seq+plen) && (e.flags&flagFINSeen == 0 || seq+plen+1 != e.sndNxt) {
		return m.drop("stale_fin")
	}
	if (plen > 0 || fin == 1) && flags&packet.RST == 0 {
		// Data past the boundary is kept for the control plane, and what
		// it says about its sender is tracked.
		keep := func() int32 {
			v := m.keep(e, flow, seq, h, body)
			if v == verdictKept {
				e.win = win
				if o.ts != 0 && (e.tsLast == 0 || after(tsval, e.tsLast)) {
					e.tsLast = tsval
				}
				if flags&packet.ACK != 0 {
					if after(ack, e.ackHi) {
						e.ackHi = ack
					}
					e.noteWindow(ack, win)
				}
			}
			return v
		}
		// Retransmissions of bytes already forwarded pass a watch.
		if e.mode == engine.Watch && after(seq+plen+fin, e.sndNxt) {
			if e.flags&flagWatchEv == 0 {
				e.flags |= flagWatchEv
				m.events = append(m.events, refEvent{EventWatch, seq, flow})
			}
			return keep(), nil
		}
		if e.limited && after(seq+plen+fin, e.limitSeq) {
			if !after(seq, e.sndNxt) && e.flags&flagLimitEv == 0 {
				e.flags |= flagLimitEv
				m.events = append(m.events, refEvent{EventLimit, e.sndNxt, flow})
			}
			return keep(), nil
		}
	}
	if m.mtu > 0 && len(f)-packet.EthLen > m.mtu {
		return m.drop("mtu_exceeded")
	}

	// Rewrite.
	binary.BigEndian.PutUint16(h[0:], e.out.Src.Port())
	binary.BigEndian.PutUint16(h[2:], e.out.Dst.Port())
	binary.BigEndian.PutUint32(h[4:], seq+e.seqOff)
	if flags&packet.ACK != 0 {
		binary.BigEndian.PutUint32(h[8:], ack-peer.seqOff)
	}
	binary.BigEndian.PutUint16(h[14:], rescale(win, e.inShift, e.outShift))
	if o.ts != 0 {
		if e.stripTS {
			for i := 0; i < 10; i++ {
				h[o.ts+i] = 1
			}
		} else {
			binary.BigEndian.PutUint32(h[o.ts+2:], tsval+e.tsOff)
			if flags&packet.ACK != 0 {
				binary.BigEndian.PutUint32(h[o.ts+6:], binary.BigEndian.Uint32(h[o.ts+6:])-peer.tsOff)
			}
		}
	}
	if o.sack != 0 {
		if e.stripSACK {
			for i := 0; i < o.sackLen; i++ {
				h[o.sack+i] = 1
			}
		} else {
			for at := o.sack + 2; at < o.sack+o.sackLen; at += 4 {
				binary.BigEndian.PutUint32(h[at:], binary.BigEndian.Uint32(h[at:])-peer.seqOff)
			}
		}
	}
	if f[packet.EthLen]>>4 == 4 {
		a, b := e.out.Src.Addr().As4(), e.out.Dst.Addr().As4()
		copy(f[packet.EthLen+12:], a[:])
		copy(f[packet.EthLen+16:], b[:])
	} else {
		a, b := e.out.Src.Addr().As16(), e.out.Dst.Addr().As16()
		copy(f[packet.EthLen+8:], a[:])
		copy(f[packet.EthLen+24:], b[:])
	}
	// Full recomputation, as a sender would: the program's incremental
	// update must give the same bytes.
	p := packet.Info{V6: f[packet.EthLen]>>4 == 6, L4: l4, End: end}
	if !p.V6 {
		binary.BigEndian.PutUint16(f[packet.EthLen+10:], packet.IPv4Checksum(f))
	}
	binary.BigEndian.PutUint16(f[l4+16:], packet.TCPChecksum(f, p))

	m.commit(e, peer, flow, seq, ack, flags, plen, win, o, tsval)
	return verdictRedirect, f
}

// commit mirrors commit() in splice.c, serially.
func (m *refModel) commit(e, peer *refDir, flow Tuple, seq, ack uint32, flags uint8, plen uint32, win uint16, o refOpts, tsval uint32) {
	e.win = win
	e.packets++
	if o.ts != 0 && (e.tsLast == 0 || after(tsval, e.tsLast)) {
		e.tsLast = tsval
	}
	if flags&packet.ACK != 0 && after(ack, e.ackHi) {
		e.ackHi = ack
	}
	if flags&packet.RST != 0 {
		// RFC 5961 3.2: only a reset exactly at the next byte closes,
		// or, after a FIN, one at the FIN (Linux's tcp_reset_check), or
		// one at the receiver's last acknowledgement (a gone sender's
		// answer to a challenge ACK, past bytes lost on the way).
		if seq == e.sndNxt || seq == peer.ackHi-e.seqOff || (e.flags&flagFINSeen != 0 && seq == e.sndNxt-1) {
			if e.flags&flagClosed == 0 {
				m.events = append(m.events, refEvent{EventReset, seq, flow})
			}
			e.flags |= flagClosed
			peer.flags |= flagClosed
		}
		return
	}
	if flags&packet.ACK != 0 {
		e.noteWindow(ack, win)
	}
	dataEnd := seq + plen
	fin := uint32(0)
	if flags&packet.FIN != 0 {
		fin = 1
	}
	// A bare ACK moves nothing: its seq may lie past data a watch or a
	// limit did not forward.
	if old := e.sndNxt; (plen > 0 || fin == 1) && after(dataEnd+fin, old) {
		e.sndNxt = dataEnd + fin
		if after(dataEnd, old) {
			e.bytes += uint64(dataEnd - old)
		}
	}
	if fin == 1 && e.flags&flagFINSeen == 0 {
		e.flags |= flagFINSeen
		m.events = append(m.events, refEvent{EventFIN, dataEnd, flow})
	}
	if flags&packet.ACK != 0 {
		if peer.flags&flagFINSeen != 0 && peer.flags&flagFINAcked == 0 && ack == peer.sndNxt+peer.seqOff {
			peer.flags |= flagFINAcked
		}
		done := uint32(flagFINSeen | flagFINAcked)
		if e.flags&done == done && peer.flags&done == done && e.flags&flagTimeWait == 0 {
			e.flags |= flagTimeWait
			peer.flags |= flagTimeWait
			m.events = append(m.events, refEvent{EventTimeWait, ack, flow})
		}
	}
	if e.limited && e.sndNxt == e.limitSeq && e.flags&flagLimitEv == 0 {
		e.flags |= flagLimitEv
		m.events = append(m.events, refEvent{EventLimit, e.limitSeq, flow})
	}
}

// answerSynAck mirrors answer_synack: the server's retransmitted SYN-ACK
// turned around into the ACK the forwarder's socket would have sent.
func answerSynAck(f []byte, l4 int, h []byte, seq uint32, e, peer *refDir) (int32, []byte) {
	ack := seq + 1
	var wnd uint32
	if edge := peer.wndEdge - e.seqOff; after(edge, ack) {
		wnd = min((edge-ack)>>min(peer.outShift, 14), 0xffff)
	}
	sport, dport := binary.BigEndian.Uint16(h[0:]), binary.BigEndian.Uint16(h[2:])
	binary.BigEndian.PutUint16(h[0:], dport)
	binary.BigEndian.PutUint16(h[2:], sport)
	binary.BigEndian.PutUint32(h[4:], peer.sndNxt+peer.seqOff)
	binary.BigEndian.PutUint32(h[8:], ack)
	h[13] = packet.ACK
	binary.BigEndian.PutUint16(h[14:], uint16(wnd))
	for i := 20; i < len(h); i++ {
		h[i] = 1 // NOP
	}
	swap := func(a, b []byte) {
		t := append([]byte(nil), a...)
		copy(a, b)
		copy(b, t)
	}
	swap(f[0:6], f[6:12])
	v6 := f[packet.EthLen]>>4 == 6
	if v6 {
		swap(f[packet.EthLen+8:packet.EthLen+24], f[packet.EthLen+24:packet.EthLen+40])
	} else {
		swap(f[packet.EthLen+12:packet.EthLen+16], f[packet.EthLen+16:packet.EthLen+20])
	}
	end := l4 + len(h)
	p := packet.Info{V6: v6, L4: l4, End: end}
	binary.BigEndian.PutUint16(f[l4+16:], packet.TCPChecksum(f, p))
	return verdictRedirect, f
}

// walkExt6's results besides walkTCP.
const (
	walkTCP       = iota // reached the TCP header
	walkFragment         // reached it through a first fragment's header
	walkNotOurs          // no TCP header to match: another protocol, ESP, a later fragment, truncated
	walkLongChain        // more extension headers than the program walks
)

// walkExt6 mirrors walk_ext6: the offset of the TCP header past the IPv6
// extension headers of frame f, whose fixed header's next header is nh.
func walkExt6(f []byte, nh byte) (int, int) {
	off := packet.EthLen + 40
	res := walkTCP
	for range 8 { // SPLICE_V6_EXT_MAX
		if nh == 6 {
			return off, res
		}
		if len(f) < off+4 {
			return off, walkNotOurs
		}
		var hl int
		switch nh {
		case 0, 43, 60, 135, 139, 140: // hop-by-hop, routing, destination options, mobility, HIP, shim6
			hl = (int(f[off+1]) + 1) * 8
		case 44: // fragment
			if binary.BigEndian.Uint16(f[off+2:])&0xfff8 != 0 {
				return off, walkNotOurs
			}
			res = walkFragment
			hl = 8
		case 51: // authentication
			hl = (int(f[off+1]) + 2) * 4
		default:
			return off, walkNotOurs
		}
		nh = f[off]
		off += hl
	}
	if nh == 6 {
		return off, res
	}
	return off, walkLongChain
}

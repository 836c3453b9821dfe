// Randomized differential test: thousands of segments with random option mixes, sizes, flags and sequence numbers (wrapping at 2^32), through the program and the Go reference, compared byte for byte and state for state.

package datapath

import (
	"bytes"
	"encoding/hex"
	"flag"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

var diffSeed = flag.Uint64("ip.seed", 0, "seed for TestDifferential (0: from the clock)")

func TestDifferential(t *testing.T) {
	// Kept segments in records of 256 bytes: most kept segments take several.
	h := newHarness(t, Options{MaxPairs: 64, keptChunk: 256})
	seed := *diffSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -ip.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	const pairs, perPair = 24, 250
	redirected := 0
	for i := range pairs {
		tp := topo4
		if rng.IntN(2) == 0 {
			tp = topo6
		}
		tp = tp.withPort(uint16(41000 + i))
		spec := randomSpec(rng, h, tp)
		h.insert(spec)
		ref := newRefModel()
		ref.insert(spec, 0)
		ref.mtu = 1500
		ref.chunk = 256
		p := h.dp.pairOf(spec.A)
		for d := range 2 {
			if rng.IntN(10) == 0 { // a direction released to the stack
				if _, _, err := h.dp.Release(spec.A, engine.Direction(d), -1); err != nil {
					t.Fatal(err)
				}
				ref.dirs[d].flags = ref.dirs[d].flags&^flagKeep | flagPass
			}
		}
		counters := func() map[string]uint64 {
			c, err := h.dp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		c0 := counters()

		for j := range perPair {
			d := rng.IntN(2)
			// Resets come late: a pair they close drops everything after.
			frame := randomSeg(rng, ref, d, tp, j >= perPair-40).Bytes()
			before := h.drops()
			refDrops := map[string]uint64{}
			for k, v := range ref.drops {
				refDrops[k] = v
			}
			dev := randomDevice(rng, h, frame)
			v, out := h.runOn(frame, dev)
			rv, rout := ref.run(frame, dev)
			where := func() string { return "device " + itoa(uint32(dev)) + " frame " + hex.EncodeToString(frame) }
			if v != rv {
				t.Fatalf("pair %d seg %d: program verdict %d, reference %d (drops %v -> %v)\n%s", i, j, v, rv, refDrops, ref.drops, where())
			}
			if got, want := dropDelta(before, h.drops()), dropDelta(refDrops, ref.drops); got != want {
				t.Fatalf("pair %d seg %d: program dropped as %q, reference as %q\n%s", i, j, got, want, where())
			}
			if v == verdictRedirect {
				redirected++
				if err := packet.CheckChecksums(out); err != nil {
					t.Fatalf("pair %d seg %d: %v\n%s", i, j, err, where())
				}
				if !bytes.Equal(out, rout) {
					t.Fatalf("pair %d seg %d: output differs\n%s\n  got %s\n want %s", i, j, where(), hex.EncodeToString(out), hex.EncodeToString(rout))
				}
			}
			for dir, rd := range []*refDir{ref.dirs[0], ref.dirs[1]} {
				if err := sameState(h.dp.entry(p.slot(engine.Direction(dir))), rd); err != "" {
					t.Fatalf("pair %d seg %d dir %d: %s\n%s", i, j, dir, err, where())
				}
			}
		}
		if c := counters(); c["kept"]-c0["kept"] != ref.nKept || c["passed"]-c0["passed"] != ref.nPassed {
			t.Fatalf("pair %d: %d kept and %d passed, reference %d and %d", i, c["kept"]-c0["kept"], c["passed"]-c0["passed"], ref.nKept, ref.nPassed)
		}
		sameKept(t, h, ref, spec, i)
		evs := h.events()
		if len(evs) != len(ref.events) {
			t.Fatalf("pair %d: %d events, reference %d: %+v vs %+v", i, len(evs), len(ref.events), evs, ref.events)
		}
		for k, e := range evs {
			if r := ref.events[k]; e.Kind != r.kind || e.Seq != r.seq || e.Flow != r.flow {
				t.Fatalf("pair %d event %d: %+v, reference %+v", i, k, e, r)
			}
		}
		if err := h.dp.Delete(spec.A); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d segments, %d redirected; drops %v", pairs*perPair, redirected, h.drops())
	if redirected < pairs*perPair/3 {
		t.Errorf("only %d of %d segments were forwarded: the generator no longer exercises the rewrite", redirected, pairs*perPair)
	}
}

// sameKept compares the records the program kept for a pair with the
// reference's, once every counted segment has arrived.
func sameKept(t *testing.T, h *harness, ref *refModel, spec PairSpec, i int) {
	t.Helper()
	for d, flow := range []Tuple{spec.A, spec.B} {
		var want []refKept
		for _, k := range ref.kept {
			if k.flow == flow {
				want = append(want, k)
			}
		}
		got, err := h.dp.AwaitKept(spec.A, engine.Direction(d), keptCount(ref.dirs[d].flags), time.Second)
		if err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		if len(got.Segs) != len(want) {
			t.Fatalf("pair %d dir %d: %d kept records, reference %d", i, d, len(got.Segs), len(want))
		}
		for j, g := range got.Segs {
			w := want[j]
			if g.Seq != w.seq || g.Last != w.last || !bytes.Equal(g.Data, w.data) || !bytes.Equal(g.Header, w.header) {
				t.Fatalf("pair %d dir %d record %d: seq %d last %v %d bytes, header %x; reference seq %d last %v %d bytes, header %x",
					i, d, j, g.Seq, g.Last, len(g.Data), g.Header, w.seq, w.last, len(w.data), w.header)
			}
		}
	}
}

// sameState compares an entry with the reference's.
func sameState(e *spliceSpliceDir, r *refDir) string {
	type pair struct {
		name      string
		got, want uint64
	}
	for _, c := range []pair{
		{"snd_nxt", uint64(atomic.LoadUint32(&e.SndNxt)), uint64(r.sndNxt)},
		{"ack_hi", uint64(atomic.LoadUint32(&e.AckHi)), uint64(r.ackHi)},
		{"wnd_edge", uint64(atomic.LoadUint32(&e.WndEdge)), uint64(r.wndEdge)},
		{"wnd_max", uint64(atomic.LoadUint32(&e.WndMax)), uint64(r.wndMax)},
		{"ts_last", uint64(atomic.LoadUint32(&e.TsLast)), uint64(r.tsLast)},
		{"flags", uint64(atomic.LoadUint32(&e.Flags)), uint64(r.flags)},
		{"win", uint64(e.Win), uint64(r.win)},
		{"bytes", atomic.LoadUint64(&e.Bytes), r.bytes},
		{"packets", atomic.LoadUint64(&e.Packets), r.packets},
	} {
		if c.got != c.want {
			return c.name + ": program " + hex.EncodeToString(be64(c.got)) + ", reference " + hex.EncodeToString(be64(c.want))
		}
	}
	return ""
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[7-i] = byte(v >> (8 * i))
	}
	return b
}

func randomSpec(rng *rand.Rand, h *harness, tp topo) PairSpec {
	shift := func() uint8 {
		if rng.IntN(4) == 0 {
			return 0
		}
		return uint8(rng.IntN(15))
	}
	nxt := func() uint32 {
		if rng.IntN(3) == 0 {
			return 0xffffffff - rng.Uint32N(300000) // wraps during the run
		}
		return rng.Uint32()
	}
	dir := func() DirSpec {
		return DirSpec{
			SeqOff: rng.Uint32(), TSOff: rng.Uint32(),
			InShift: shift(), OutShift: shift(),
			StripTS: rng.IntN(5) == 0, StripSACK: rng.IntN(5) == 0,
			SndNxt: nxt(), TSLast: rng.Uint32() * uint32(rng.IntN(2)),
		}
	}
	spec := PairSpec{A: tp.a(), B: tp.b(), IfindexA: h.ns.ifA, IfindexB: h.ns.ifB, Up: dir(), Down: dir(), Keep: rng.IntN(6) == 0}
	spec.Up.AckHi = spec.Down.SndNxt + spec.Down.SeqOff - rng.Uint32N(3000)
	spec.Down.AckHi = spec.Up.SndNxt + spec.Up.SeqOff - rng.Uint32N(3000)
	for _, d := range []*DirSpec{&spec.Up, &spec.Down} {
		switch rng.IntN(20) {
		case 0:
			d.Mode = engine.Watch
		case 1:
			d.Mode = engine.Hold
		case 2, 3:
			d.Limited, d.LimitSeq = true, d.SndNxt+rng.Uint32N(30000)
		}
	}
	return spec
}

// randomSeg builds a segment in direction d (0 up, 1 down) around the
// reference's current state: mostly valid, sometimes at the guards' edges
// (the span around snd_nxt, the receiver's window), sometimes far outside,
// with a random option mix.
func randomSeg(rng *rand.Rand, ref *refModel, d int, tp topo, resets bool) packet.Seg {
	e, peer := ref.dirs[d], ref.dirs[d^1]
	s := packet.Seg{Win: uint16(rng.Uint32()), IPID: uint16(rng.Uint32()), TTL: uint8(1 + rng.IntN(255))}
	if rng.IntN(5) == 0 {
		s.Win = uint16(rng.IntN(16)) // small or zero windows bring the other direction's edge close
	}

	seqSpan := seqBound(peer)
	wndEdge := peer.wndEdge - e.seqOff // the receiver's right edge, in the sender's space
	switch r := rng.IntN(100); {
	case r < 62:
		s.Seq = e.sndNxt
	case r < 77:
		s.Seq = e.sndNxt - rng.Uint32N(5000)
	case r < 85:
		s.Seq = e.sndNxt + rng.Uint32N(5000)
	case r < 91:
		edge := []uint32{seqSpan, seqSpan + 1, -seqSpan, -seqSpan - 1}[rng.IntN(4)]
		s.Seq = e.sndNxt + edge
	case r < 97:
		s.Seq = wndEdge + []uint32{^uint32(0), 0, 1, 1 + rng.Uint32N(3000)}[rng.IntN(4)]
	default:
		s.Seq = rng.Uint32()
	}
	sent := peer.sndNxt + peer.seqOff
	ackSpan := span(max(e.inShift, e.outShift))
	switch r := rng.IntN(100); {
	case r < 70:
		s.Ack = sent - rng.Uint32N(3000)
	case r < 82:
		s.Ack = sent
	case r < 88:
		s.Ack = sent + 1 + rng.Uint32N(100)
	case r < 91:
		s.Ack = sent - ackSpan + uint32(rng.IntN(3)) - 1
	case r < 94: // around the oldest ack the sender's largest window allows
		s.Ack = e.ackHi - e.maxWindow() + uint32(rng.IntN(3)) - 1
	default:
		s.Ack = rng.Uint32()
	}

	if rng.IntN(100) < 96 {
		s.Flags |= packet.ACK
	}
	for _, f := range []struct {
		bit  uint8
		perc int
	}{{packet.PSH, 30}, {packet.FIN, 2}, {packet.SYN, 1}, {packet.URG, 3}, {0x40, 3}, {0x80, 3}} {
		if rng.IntN(100) < f.perc {
			s.Flags |= f.bit
		}
	}
	if resets && rng.IntN(100) < 3 {
		s.Flags |= packet.RST
	}
	if s.Flags&packet.URG != 0 {
		s.Urg = uint16(rng.Uint32())
	}

	switch r := rng.IntN(100); {
	case r < 40:
	case r < 70:
		s.Payload = make([]byte, 1+rng.IntN(100))
	case r < 99:
		s.Payload = make([]byte, 100+rng.IntN(1300))
	default:
		s.Payload = make([]byte, 1461+rng.IntN(500)) // too big for the peer's MTU, or not, with options
	}
	for i := range s.Payload {
		s.Payload[i] = byte(rng.Uint32())
	}
	s.Opts = randomOpts(rng, e, s.Ack)
	if tp.client.Addr().Is6() && rng.IntN(30) == 0 {
		s.Ext6 = randomExt6(rng)
	}

	if d == 0 {
		return tp.up(s)
	}
	return tp.down(s)
}

// randomDevice is the device a generated frame arrives on: mostly the one
// toward its source, sometimes the other harness device or loopback,
// where its sender is not (a segment forged on another link).
func randomDevice(rng *rand.Rand, h *harness, frame []byte) int {
	dev := h.deviceOf(frame)
	switch r := rng.IntN(100); {
	case r < 6:
		return h.otherDevice(dev)
	case r < 8:
		return 1 // loopback
	}
	return dev
}

func randomOpts(rng *rand.Rand, e *refDir, ack uint32) []byte {
	var o []byte
	room := func(n int) bool { return len(o)+n <= 40 }
	if rng.IntN(10) < 6 {
		o = append(o, bytes.Repeat(packet.OptNOP(), rng.IntN(4))...)
		val := e.tsLast + rng.Uint32N(2000) - 500
		if rng.IntN(10) == 0 {
			val = rng.Uint32()
		}
		o = append(o, packet.OptTS(val, rng.Uint32())...)
	}
	if rng.IntN(20) == 0 && room(4) {
		o = append(o, packet.OptMSS(uint16(rng.Uint32()))...)
	}
	if rng.IntN(20) == 0 && room(6) {
		o = append(o, packet.OptUnknown(byte(30+rng.IntN(200)), 1, 2, 3, 4)...)
	}
	if rng.IntN(10) < 3 {
		o = append(o, bytes.Repeat(packet.OptNOP(), rng.IntN(3))...)
		blocks := 1 + rng.IntN(4)
		for blocks > 0 && !room(2+8*blocks) {
			blocks--
		}
		if blocks > 0 {
			var edges []uint32
			left := ack + rng.Uint32N(1000)
			for range blocks {
				right := left + 1 + rng.Uint32N(3000)
				edges = append(edges, left, right)
				left = right + rng.Uint32N(3000)
			}
			o = append(o, packet.OptSACK(edges...)...)
		}
	}
	switch rng.IntN(50) {
	case 0: // an option whose length overruns the header
		if room(2) {
			o = append(o, 253, byte(40-len(o)+4))
		}
	case 1: // a timestamp option of the wrong length
		if room(6) {
			o = append(o, 8, 6, 0, 0, 0, 0)
		}
	case 2: // EOL then garbage, which must be ignored
		if room(4) {
			o = append(o, 0, 8, 99, 1)
		}
	}
	return o
}

// randomExt6 is a chain of IPv6 extension headers: mostly one or two,
// sometimes a fragment header, now and then more than the program walks.
func randomExt6(rng *rand.Rand) []packet.Ext6 {
	n := 1 + rng.IntN(2)
	if rng.IntN(5) == 0 {
		n = 7 + rng.IntN(4)
	}
	ext := make([]packet.Ext6, n)
	for i := range ext {
		switch rng.IntN(6) {
		case 0:
			ext[i] = packet.ExtFrag6(uint16(rng.IntN(2)*rng.IntN(200)), rng.IntN(2) == 0)
		case 1:
			ext[i] = packet.Ext6{Proto: packet.AH, Body: []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} // 12 bytes: no ICV
		case 2:
			ext[i] = packet.ExtOpts6(packet.HopByHop)
		default:
			ext[i] = packet.ExtOpts6(packet.DestOpts)
		}
	}
	return ext
}

// Fuzz target: the reference model against the real program (Program.Run) on frames the fuzzer mutates from generated segments: malformed headers, option soup, lengths that lie. Verdict, drop reason, output bytes and state must agree.

package datapath

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/ip/internal/packet"
)

var (
	fuzzHarnessOnce sync.Once
	fuzzHarness     *harness
	fuzzPort        uint16
)

// FuzzDatapath: seed picks a pair and a run of generated segments; edits
// (offset, xor byte pairs) are applied to the last segment's frame before
// it goes through both. Needs root (skips without, fails under CI=true).
func FuzzDatapath(f *testing.F) {
	// Freed slots wait a second before reuse: room for many inputs a second.
	fuzzHarnessOnce.Do(func() { fuzzHarness = newHarness(f, Options{MaxPairs: 1 << 15}) })
	h := fuzzHarness
	f.Add(uint64(1), []byte{})
	f.Add(uint64(2), []byte{46, 0xff, 47, 0x10})        // TCP data offset and flags of an IPv4 frame
	f.Add(uint64(3), []byte{16, 0x01, 17, 0x00})        // IPv4 total length
	f.Add(uint64(4), []byte{54, 0x02, 55, 0x04})        // the first option bytes
	f.Add(uint64(5), []byte{20, 0x20, 21, 0x00, 22, 1}) // fragment bits
	f.Add(uint64(7), []byte{20, 6 ^ 60})                // an IPv6 frame's next header: destination options
	f.Fuzz(func(t *testing.T, seed uint64, edits []byte) {
		h.tb = t // the harness reports to this input's test (one at a time per worker)
		defer func() { h.tb = f }()
		// Events left by earlier inputs are read out, so the ring buffer
		// never fills (the program would then count an event_lost the
		// reference does not).
		h.events()
		defer h.events()
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		tp := topo4
		if seed%2 == 1 {
			tp = topo6
		}
		fuzzPort++
		tp = tp.withPort(30000 + fuzzPort%20000)
		spec := randomSpec(rng, h, tp)
		h.insert(spec)
		defer h.dp.Delete(spec.A)
		ref := newRefModel()
		ref.insert(spec, 0)
		ref.mtu = 1500
		p := h.dp.pairOf(spec.A)
		n := 1 + rng.IntN(8)
		for j := range n {
			d := rng.IntN(2)
			frame := randomSeg(rng, ref, d, tp, false).Bytes()
			if j == n-1 {
				for k := 0; k+1 < len(edits); k += 2 {
					if off := int(edits[k]); off < len(frame) {
						frame[off] ^= edits[k+1]
					}
				}
				// Checksums made valid again where the frame still
				// parses: the program updates them incrementally, the
				// reference recomputes them, so they agree only on
				// frames that arrived intact (a corrupt one stays
				// corrupt through the program, as it should).
				refreshChecksums(frame)
			}
			compareRun(t, h, ref, p, frame, randomDevice(rng, h, frame))
		}
	})
}

// compareRun sends frame through the program and the reference, arriving
// on device dev, and fails t if they disagree on anything observable.
func compareRun(t *testing.T, h *harness, ref *refModel, p *pair, frame []byte, dev int) {
	t.Helper()
	before := h.drops()
	refDrops := map[string]uint64{}
	for k, v := range ref.drops {
		refDrops[k] = v
	}
	v, out := h.runOn(frame, dev)
	rv, rout := ref.run(frame, dev)
	where := "device " + itoa(uint32(dev)) + " frame " + hex.EncodeToString(frame)
	if v != rv {
		t.Fatalf("program verdict %d, reference %d\n%s", v, rv, where)
	}
	if got, want := dropDelta(before, h.drops()), dropDelta(refDrops, ref.drops); got != want {
		t.Fatalf("program dropped as %q, reference as %q\n%s", got, want, where)
	}
	if v == verdictRedirect && !bytes.Equal(out, rout) {
		t.Fatalf("output differs\n%s\n  got %s\n want %s", where, hex.EncodeToString(out), hex.EncodeToString(rout))
	}
	for dir, rd := range []*refDir{ref.dirs[0], ref.dirs[1]} {
		if err := sameState(h.dp.entry(p.slot(engine.Direction(dir))), rd); err != "" {
			t.Fatalf("dir %d: %s\n%s", dir, err, where)
		}
	}
}

// refreshChecksums recomputes a frame's checksums where the test helpers
// can parse it; a frame too broken for them keeps its bytes (the program
// must still agree with the reference on dropping or passing it).
func refreshChecksums(frame []byte) {
	defer func() { recover() }()
	if _, err := packet.Parse(frame); err == nil {
		packet.FixChecksums(frame)
	}
}

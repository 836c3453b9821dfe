// The window guard on the real program and the reference: data or a FIN starting past the receiver's window (its latest ack plus its advertised window, in its own scale, across the translation offsets) is dropped and moves nothing: not snd_nxt, the byte count, FIN_SEEN, nor a watch or limit event.

package datapath

import (
	"testing"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// setMode changes a direction's mode in the program and the reference.
func (w *twin) setMode(dir engine.Direction, m DirMode) {
	w.tb.Helper()
	if err := w.h.dp.SetMode(w.spec.A, dir, m); err != nil {
		w.tb.Fatalf("SetMode: %v", err)
	}
	r := w.ref.dirs[int(dir)]
	r.mode, r.limited, r.limitSeq = m.Mode, m.Limited, m.LimitSeq
	r.flags &^= flagLimitEv | flagWatchEv
}

// TestWindowGuard: with different window scales on the two connections
// (the client's 3, the server's 9) and the base spec's offsets, each
// direction's data is bounded by the window the other side offered, in
// that side's scale: the seed until its first ACK, then what its ACKs
// said. Past the edge, data and FINs are dropped as seq_out_of_window and
// leave the state as it was; at the edge (a zero-window probe) they pass.
func TestWindowGuard(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec := h.baseSpec(tp)
		spec.Up.InShift, spec.Down.InShift = 3, 9
		w := newTwin(t, h, spec)
		a := spec.A
		h.events()

		// Seeds: each sender's ack plus the widest window its scale allows.
		st := h.stats(a)
		if want := uint32(upAcked + 65535<<3); st.Up.WindowEdge != want {
			t.Errorf("client's seeded edge %d, want %d", st.Up.WindowEdge, want)
		}
		if want := uint32(upNxt + upOff + 65535<<9); st.Down.WindowEdge != want {
			t.Errorf("server's seeded edge %d, want %d", st.Down.WindowEdge, want)
		}
		w.send("server data past the client's seeded window", tp.down(packet.Seg{Seq: downNxt + 65535<<3 + 1, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: payload}), verdictDrop, "seq_out_of_window")

		// The client's first ACK replaces the seed: 16 << 3 = 128 bytes.
		w.send("client ACK, window 16", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 16}), verdictRedirect, "")
		if got := h.stats(a).Up.WindowEdge; got != upAcked+128 {
			t.Fatalf("client's edge %d after its ACK, want %d", got, upAcked+128)
		}
		w.send("server data in the window", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: make([]byte, 100)}), verdictRedirect, "")
		before := h.stats(a)
		w.send("server data one byte past the window", tp.down(packet.Seg{Seq: downNxt + 129, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: payload}), verdictDrop, "seq_out_of_window")
		w.send("server FIN past the window", tp.down(packet.Seg{Seq: downNxt + 129, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN, Win: 1}), verdictDrop, "seq_out_of_window")
		w.send("server data and FIN far past the window", tp.down(packet.Seg{Seq: downNxt + 5000, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN, Win: 1, Payload: payload}), verdictDrop, "seq_out_of_window")
		sameStats(t, "segments past the window", before, h.stats(a))
		if evs := h.events(); len(evs) != 0 {
			t.Errorf("segments past the window reported %v", kinds(evs))
		}

		// Filling the window to its edge, then a probe byte at the edge.
		w.send("server data to the edge", tp.down(packet.Seg{Seq: downNxt + 100, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: make([]byte, 28)}), verdictRedirect, "")
		w.send("server probe byte at the edge", tp.down(packet.Seg{Seq: downNxt + 128, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: []byte{'x'}}), verdictRedirect, "")
		if got := h.stats(a).Down; got.SndNxt != downNxt+129 || got.Bytes != 129 {
			t.Errorf("server direction snd_nxt %d bytes %d, want %d and 129", got.SndNxt, got.Bytes, downNxt+129)
		}

		// Neither an older ACK with a zero window nor a reset closes the
		// window again.
		w.send("reordered old client ACK, window 0", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked - 50, Flags: packet.ACK}), verdictRedirect, "")
		w.send("client reset inside the window, window 0", tp.up(packet.Seg{Seq: upNxt + 5, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		if got := h.stats(a).Up.WindowEdge; got != upAcked+128 {
			t.Errorf("client's edge %d after an old ACK and a reset, want %d", got, upAcked+128)
		}

		// A watched direction: data past the window raises no watch
		// event and is not kept; in the window it is.
		w.setMode(engine.Down, DirMode{Mode: engine.Watch})
		w.send("watched server data past the window", tp.down(packet.Seg{Seq: downNxt + 200, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: payload}), verdictDrop, "seq_out_of_window")
		if st := h.stats(a).Down; st.Watched || st.Kept != 0 {
			t.Errorf("data past the window watched %v, kept %d", st.Watched, st.Kept)
		}
		w.send("client ACK of the server's bytes, window 16", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 129, Flags: packet.ACK, Win: 16}), verdictRedirect, "")
		w.send("watched server data now in the window", tp.down(packet.Seg{Seq: downNxt + 200, Ack: upNxt + upOff, Flags: packet.ACK, Win: 1, Payload: payload}), verdictKept, "")
		if evs := h.events(); len(evs) != 1 || evs[0].Kind != EventWatch || evs[0].Seq != downNxt+200 {
			t.Errorf("events %+v, want one watch at %d", evs, downNxt+200)
		}

		// The other way, in the server's scale: its segments above all
		// offered 1 << 9 = 512 bytes.
		if got := h.stats(a).Down.WindowEdge; got != upNxt+upOff+512 {
			t.Errorf("server's edge %d, want %d", got, upNxt+upOff+512)
		}
		w.setMode(engine.Up, DirMode{Mode: engine.Forward, Limited: true, LimitSeq: upNxt + 50})
		before = h.stats(a)
		w.send("limited client data past the window", tp.up(packet.Seg{Seq: upNxt + 513, Ack: upAcked, Flags: packet.ACK, Win: 16, Payload: payload}), verdictDrop, "seq_out_of_window")
		sameStats(t, "limited data past the window", before, h.stats(a))
		if evs := h.events(); len(evs) != 0 {
			t.Errorf("limited data past the window reported %v", kinds(evs))
		}
		w.send("limited client data at the edge, crossing the limit", tp.up(packet.Seg{Seq: upNxt + 512, Ack: upAcked, Flags: packet.ACK, Win: 16, Payload: payload}), verdictKept, "")
		w.send("limited client data in the window, crossing the limit", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 16, Payload: make([]byte, 100)}), verdictKept, "")
		if evs := h.events(); len(evs) != 1 || evs[0].Kind != EventLimit || evs[0].Seq != upNxt {
			t.Errorf("events %+v, want one limit at %d", evs, upNxt)
		}
		h.dp.Delete(a)
	}
}

// TestWindowSeedAfterUpdate: Update seeds the edge again (the sender's
// new ack plus the widest window), and the next ACK forwarded replaces
// that seed rather than only raising it.
func TestWindowSeedAfterUpdate(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 16}), verdictRedirect)
	if got := h.stats(spec.A).Up.WindowEdge; got != upAcked+16<<7 {
		t.Fatalf("client's edge %d, want %d", got, upAcked+16<<7)
	}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if err := h.dp.SetMode(spec.A, d, DirMode{Mode: engine.Hold}); err != nil {
			t.Fatal(err)
		}
	}
	spec.Up.AckHi -= 10
	if err := h.dp.Update(spec); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got, want := h.stats(spec.A).Up.WindowEdge, uint32(upAcked-10+65535<<7); got != want {
		t.Fatalf("client's edge %d after Update, want the seed %d", got, want)
	}
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked - 10, Flags: packet.ACK, Win: 2}), verdictRedirect)
	if got := h.stats(spec.A).Up.WindowEdge; got != upAcked-10+2<<7 {
		t.Fatalf("client's edge %d after its next ACK, want %d", got, upAcked-10+2<<7)
	}
	h.send(tp.down(packet.Seg{Seq: downNxt - 10 + 2<<7 + 1, Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload}), verdictDrop)
	h.send(tp.down(packet.Seg{Seq: downNxt - 10 + 2<<7, Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload}), verdictRedirect)
}

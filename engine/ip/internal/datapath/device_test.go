// The device check on the real program and the reference: a spliced flow's segment arriving on another device than the one toward its sender is dropped and changes nothing: no translation, no tracked state, no reset, no kept segment, no reopened tuple.

package datapath

import (
	"testing"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// tracked is a direction's tracked state without its clock reading.
func tracked(d DirStats) DirStats {
	d.LastSeen = 0
	return d
}

// sameStats fails tb unless the pair's tracked state is what it was.
func sameStats(tb testing.TB, what string, before, after PairStats) {
	tb.Helper()
	if before.Phase != after.Phase || tracked(before.Up) != tracked(after.Up) || tracked(before.Down) != tracked(after.Down) {
		tb.Errorf("%s moved the pair's state:\n before %+v\n after  %+v", what, before, after)
	}
}

// TestWrongDeviceChangesNothing: data, a FIN, a reset at the next byte
// and a SYN on an ended pair, each carrying a spliced pair's 4-tuple but
// arriving on the other device (or loopback), are dropped as
// wrong_device and leave the pair as it was; the same segments on the
// right device do what they always did.
func TestWrongDeviceChangesNothing(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec := h.baseSpec(tp)
		st := newTwin(t, h, spec)
		a, ifA, ifB := spec.A, h.ns.ifA, h.ns.ifB
		h.events()

		before := h.stats(a)
		data := tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 9, Payload: payload})
		st.sendOn("client data on the server's device", data, ifB, verdictDrop, "wrong_device")
		st.sendOn("client data on loopback", data, 1, verdictDrop, "wrong_device")
		st.sendOn("server data on the client's device", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Payload: payload}), ifA, verdictDrop, "wrong_device")
		st.sendOn("client FIN on the server's device", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN}), ifB, verdictDrop, "wrong_device")
		st.sendOn("client reset at the next byte on the server's device", tp.up(packet.Seg{Seq: upNxt, Flags: packet.RST}), ifB, verdictDrop, "wrong_device")
		sameStats(t, "segments on the wrong device", before, h.stats(a))
		if evs := h.events(); len(evs) != 0 {
			t.Errorf("segments on the wrong device reported %v", kinds(evs))
		}

		// On the right device the same data is forwarded, and the reset
		// at the byte after it closes the pair.
		st.sendOn("client data on its device", data, ifA, verdictRedirect, "")
		if got := h.stats(a).Up.SndNxt; got != upNxt+uint32(len(payload)) {
			t.Errorf("snd_nxt %d after the data, want %d", got, upNxt+len(payload))
		}
		rst := tp.up(packet.Seg{Seq: upNxt + uint32(len(payload)), Flags: packet.RST})
		st.sendOn("the reset on the server's device", rst, ifB, verdictDrop, "wrong_device")
		if got := h.stats(a).Phase; got != PhaseSpliced {
			t.Errorf("phase %v after a reset on the wrong device, want spliced", got)
		}
		st.sendOn("the reset on the client's device", rst, ifA, verdictRedirect, "")
		if got := h.stats(a).Phase; got != PhaseClosed {
			t.Errorf("phase %v after the reset, want closed", got)
		}

		// An ended pair's tuple is reopened only by a SYN from the
		// client's side.
		syn := tp.up(packet.Seg{Seq: 77, Flags: packet.SYN, Win: 9})
		c0 := counters(t, h)
		st.sendOn("a SYN on the ended pair's tuple on the server's device", syn, ifB, verdictDrop, "wrong_device")
		if c := counters(t, h); c["reopened"] != c0["reopened"] {
			t.Errorf("a SYN on the wrong device reopened the tuple")
		}
		st.sendOn("the SYN on the client's device", syn, ifA, verdictPass, "")
		if c := counters(t, h); c["reopened"] != c0["reopened"]+1 {
			t.Errorf("reopened %d, want %d", c["reopened"], c0["reopened"]+1)
		}
		h.events()
		h.dp.Delete(a)
	}
}

// TestWrongDeviceNotKept: a pair held and keeping keeps what arrives on
// the device toward each sender, and not what arrives on the other.
func TestWrongDeviceNotKept(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	tp := topo4
	spec := h.baseSpec(tp)
	spec.Up.Mode, spec.Down.Mode, spec.Keep = engine.Hold, engine.Hold, true
	st := newTwin(t, h, spec)

	data := tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: payload})
	st.sendOn("held client data on the server's device", data, h.ns.ifB, verdictDrop, "wrong_device")
	if n := h.stats(spec.A).Up.Kept; n != 0 {
		t.Errorf("%d segments kept from the wrong device", n)
	}
	st.sendOn("held client data on its device", data, h.ns.ifA, verdictKept, "")
	if n := h.stats(spec.A).Up.Kept; n != 1 {
		t.Fatalf("%d segments kept, want 1", n)
	}
	k, err := h.dp.AwaitKept(spec.A, engine.Up, 1, time.Second)
	if err != nil || len(k.Segs) != 1 || string(k.Segs[0].Data) != string(payload) {
		t.Fatalf("kept %+v (%v), want the one segment from the client's device", k, err)
	}
}

func counters(tb testing.TB, h *harness) map[string]uint64 {
	tb.Helper()
	c, err := h.dp.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

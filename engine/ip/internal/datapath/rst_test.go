// RFC 5961 on the real program and the reference: a reset inside the window but not at the next byte is passed on (its receiver answers with a challenge ACK) and leaves the pair spliced; only a reset exactly at the next byte, at the receiver's last acknowledgement, or after a FIN at the FIN's, closes it.

package datapath

import (
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

func TestResetClosesOnlyAtTheNextByte(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec, step := insertBoth(t, h, tp)
		data := packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: []byte("x")}
		for _, off := range []uint32{1, 100, 5000} {
			step("reset behind the next byte by "+itoa(off), tp.up(packet.Seg{Seq: upNxt - off, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
			step("reset ahead of the next byte by "+itoa(off), tp.up(packet.Seg{Seq: upNxt + off, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		}
		// The receiver's challenge ACK goes back to the resetting side.
		step("challenge ACK", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9}), verdictRedirect, "")
		step("data after in-window resets", tp.up(data), verdictRedirect, "")
		next := uint32(upNxt + 1) // the byte after the data above
		step("reset at the next byte", tp.up(packet.Seg{Seq: next, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		data.Seq = next
		step("data after the reset", tp.up(data), verdictDrop, "closed")
		h.dp.Delete(spec.A)
	}
}

// TestResetAtTheFINClosesAfterIt: a client that closed (FIN) and then
// gets data answers with a reset numbered from that data's ack, which may
// be the FIN's own number; the server, in CLOSE_WAIT, takes it (Linux's
// tcp_reset_check), so the datapath must close the pair too, or it would
// hold it until its idle timeout with both sockets gone.
func TestResetAtTheFINClosesAfterIt(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec, step := insertBoth(t, h, tp)
		step("FIN", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.FIN | packet.ACK, Win: 9}), verdictRedirect, "")
		step("the server's data, acking below the FIN", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Payload: []byte("ticket")}), verdictRedirect, "")
		step("reset at the FIN", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 6, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		step("data after the reset", tp.down(packet.Seg{Seq: downNxt + 6, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Payload: []byte("x")}), verdictDrop, "closed")
		if got := h.stats(spec.A).Phase; got != PhaseClosed {
			t.Errorf("phase %v after the reset at the FIN, want closed", got)
		}
		h.dp.Delete(spec.A)
	}
}

// TestResetAtTheReceiversAckCloses: bytes forwarded and then lost on the
// way leave the receiver behind the datapath's next byte. A sender whose
// socket is gone answers the receiver's challenge ACK with a reset
// numbered from that ACK, which the receiver takes; the pair closes with
// it, or it would outlive both sockets (found by TestLabRandomResets).
func TestResetAtTheReceiversAckCloses(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec, step := insertBoth(t, h, tp)
		step("data the receiver never gets", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: []byte("lost")}), verdictRedirect, "")
		step("reset past the receiver's ack, short of the next byte", tp.up(packet.Seg{Seq: upNxt + 1, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		if got := h.stats(spec.A).Phase; got == PhaseClosed {
			t.Fatalf("closed by a reset at neither the next byte nor the receiver's ack")
		}
		step("challenge ACK, still at the lost data", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9}), verdictRedirect, "")
		step("reset at the receiver's ack", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.RST | packet.ACK}), verdictRedirect, "")
		step("data after the reset", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9, Payload: []byte("x")}), verdictDrop, "closed")
		if got := h.stats(spec.A).Phase; got != PhaseClosed {
			t.Errorf("phase %v after the reset at the receiver's ack, want closed", got)
		}
		h.dp.Delete(spec.A)
	}
}

// insertBoth inserts the base pair on tp in the program and in a fresh
// reference model, and returns a step that runs a segment through both and
// checks their verdicts and the program's drop reason.
func insertBoth(t *testing.T, h *harness, tp topo) (PairSpec, func(what string, in packet.Seg, want int32, wantDrop string)) {
	t.Helper()
	spec := h.baseSpec(tp)
	h.insert(spec)
	ref := newRefModel()
	ref.insert(spec, 0)
	ref.mtu = 1500
	return spec, func(what string, in packet.Seg, want int32, wantDrop string) {
		t.Helper()
		frame := in.Bytes()
		before := h.drops()
		verdict, _ := h.run(frame)
		drop := dropDelta(before, h.drops())
		refVerdict, _ := ref.run(frame, h.deviceOf(frame))
		if verdict != want || drop != wantDrop {
			t.Errorf("%s: program verdict %d drop %q, want %d %q", what, verdict, drop, want, wantDrop)
		}
		if refVerdict != want {
			t.Errorf("%s: reference verdict %d, want %d", what, refVerdict, want)
		}
	}
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

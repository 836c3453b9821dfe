// The server's retransmitted SYN-ACK on a spliced flow, on the real program and the reference: answered with the ACK that completes the server's handshake, sent back toward the server; any other SYN is dropped.

package datapath

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// TestSynAckAnswered: the forwarder's ACK of the server's SYN-ACK was lost
// and the pair spliced before the server sent it again. The retransmitted
// SYN-ACK (seq one before what the server sends next, no payload) comes
// back as that ACK, the program's and the reference's byte for byte: from
// the forwarder's address and port to the server's, seq the client side's
// next in the server's space, ack the SYN's + 1, ACK alone, a window, the
// options NOPs, valid checksums. A SYN-ACK at another seq, one with data
// and a bare SYN are dropped as before, and none moves the tracked state.
func TestSynAckAnswered(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec := h.baseSpec(tp)
		w := newTwin(t, h, spec)
		opts := packet.Cat(packet.OptMSS(1460), packet.OptNOP(), packet.OptNOP(), packet.OptTS(777, 888), packet.OptNOP(), []byte{3, 3, 7})
		synAck := tp.down(packet.Seg{Seq: downNxt - 1, Ack: upNxt + upOff, Flags: packet.SYN | packet.ACK, Win: 64240, Opts: opts})

		before := h.stats(spec.A)
		frame := synAck.Bytes()
		verdict, out := h.runOn(frame, h.deviceOf(frame))
		refVerdict, refOut := w.ref.run(synAck.Bytes(), h.deviceOf(frame))
		if verdict != verdictRedirect || refVerdict != verdictRedirect {
			t.Fatalf("retransmitted SYN-ACK: program verdict %d, reference %d, want both %d", verdict, refVerdict, verdictRedirect)
		}
		if !bytes.Equal(out, refOut) {
			t.Errorf("the program's ACK differs from the reference's:\n%x\n%x", out, refOut)
		}
		checkSynAckAnswer(t, out, synAck.Bytes(), tp)
		sameStats(t, "an answered SYN-ACK", before, h.stats(spec.A))

		w.send("a SYN-ACK at another seq", tp.down(packet.Seg{Seq: downNxt - 2, Ack: upNxt + upOff, Flags: packet.SYN | packet.ACK, Win: 64240, Opts: opts}), verdictDrop, "syn_on_spliced")
		w.send("a SYN-ACK with data", tp.down(packet.Seg{Seq: downNxt - 1, Ack: upNxt + upOff, Flags: packet.SYN | packet.ACK, Win: 64240, Payload: payload}), verdictDrop, "syn_on_spliced")
		w.send("a bare SYN from the client", tp.up(packet.Seg{Seq: upNxt - 1, Flags: packet.SYN, Win: 64240}), verdictDrop, "syn_on_spliced")
	}
}

// checkSynAckAnswer checks the fields of the ACK made from the SYN-ACK in.
func checkSynAckAnswer(tb testing.TB, out, in []byte, tp topo) {
	tb.Helper()
	p, err := packet.Parse(out)
	if err != nil {
		tb.Fatalf("the answer does not parse: %v", err)
	}
	if err := packet.CheckChecksums(out); err != nil {
		tb.Errorf("the answer's checksums: %v", err)
	}
	h := out[p.L4 : p.L4+p.HLen]
	if p.Src != tp.fb || p.Dst != tp.server {
		tb.Errorf("answer from %v to %v, want %v to %v", p.Src, p.Dst, tp.fb, tp.server)
	}
	if seq, ack := binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint32(h[8:]); seq != upNxt+upOff || ack != downNxt {
		tb.Errorf("answer seq %d ack %d, want %d and %d", seq, ack, upNxt+upOff, downNxt)
	}
	if h[13] != packet.ACK {
		tb.Errorf("answer flags %#x, want ACK alone", h[13])
	}
	if win := binary.BigEndian.Uint16(h[14:]); win == 0 {
		tb.Error("answer offers a zero window")
	}
	for i, b := range h[20:] {
		if b != 1 {
			tb.Errorf("option byte %d is %d, want NOP", i, b)
			break
		}
	}
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
		tb.Errorf("MAC addresses %x, want those of %x swapped", out[0:12], in[0:12])
	}
}

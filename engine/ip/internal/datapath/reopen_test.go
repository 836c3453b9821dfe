// A client's SYN on the 4-tuple of a pair, on the real program and the reference: reopened (handed to the listener) once the client is done with the pair, even if the pair never saw its own end; dropped while the client's connection may still be alive or still receiving.

package datapath

import (
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// TestSYNOnReusedTuple: a client closes first, sits out its TIME_WAIT and
// connects again from the same port. The pair of its old connection may
// still be in the table in a state other than TIME_WAIT: its last ACK of
// the server's FIN never reached the program (lost on the wire, or
// dropped). Once both sides sent their FIN and the client's was
// acknowledged, its new SYN reaches the stack (a new connection: counted
// as reopened, never dropped), its handshake's ACK too, and the new
// connection's pair can be spliced on the same tuples. While the client's
// FIN is unacknowledged (it may still send it again), it has not closed,
// or the server still sends into the half-closed connection (the client
// still reads it: a SYN on its tuple is a stranger's), the SYN is
// dropped, and the tuple stays the old pair's.
func TestSYNOnReusedTuple(t *testing.T) {
	const clientFINEnd = uint32(upNxt + 1)
	clientFIN := func(tp topo) packet.Seg {
		return tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN})
	}
	serverFIN := func(tp topo) packet.Seg { // acknowledging the client's FIN
		return tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN})
	}
	serverACK := func(tp topo) packet.Seg {
		return tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK})
	}
	cases := []struct {
		name   string
		segs   func(topo) []packet.Seg
		phase  Phase
		reopen bool
	}{
		{"live pair", func(topo) []packet.Seg { return nil }, PhaseSpliced, false},
		{"client FIN not acknowledged yet", func(tp topo) []packet.Seg { return []packet.Seg{clientFIN(tp)} }, PhaseFINRelayed1, false},
		{"server FIN acknowledged, client still open", func(tp topo) []packet.Seg {
			return []packet.Seg{
				tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN}),
				tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 1, Flags: packet.ACK}),
			}
		}, PhaseACKRelayed1, false},
		{"client FIN acknowledged, server still open", func(tp topo) []packet.Seg {
			return []packet.Seg{clientFIN(tp), serverACK(tp)}
		}, PhaseACKRelayed1, false},
		{"both FINs, the client's last ACK never seen", func(tp topo) []packet.Seg {
			return []packet.Seg{clientFIN(tp), serverFIN(tp)}
		}, PhaseFINRelayed2, true},
		{"time_wait", func(tp topo) []packet.Seg {
			return []packet.Seg{clientFIN(tp), serverFIN(tp), tp.up(packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK})}
		}, PhaseTimeWait, true},
	}
	h := newHarness(t, Options{MaxPairs: 64})
	for i, c := range cases {
		for _, tp := range []topo{topo4, topo6} {
			tp := tp.withPort(41000 + uint16(i))
			t.Run(c.name+"/"+tp.a().Src.Addr().String(), func(t *testing.T) {
				spec := h.baseSpec(tp)
				w := newTwin(t, h, spec)
				for _, s := range c.segs(tp) {
					w.send("closing", s, verdictRedirect, "")
				}
				if got := h.stats(spec.A).Phase; got != c.phase {
					t.Fatalf("phase %v, want %v", got, c.phase)
				}
				h.events()
				before := counters(t, h)
				syn := tp.up(packet.Seg{Seq: clientFINEnd + 1_000_000, Flags: packet.SYN, Win: 64240, Opts: packet.OptMSS(1460)})
				if !c.reopen {
					w.send("the new SYN", syn, verdictDrop, "syn_on_spliced")
					if err := h.dp.Insert(spec); err == nil {
						t.Error("a new pair took the tuples of a live one")
					}
					return
				}
				w.send("the new SYN", syn, verdictPass, "")
				if got := counters(t, h)["reopened"] - before["reopened"]; got != 1 {
					t.Errorf("reopened %d, want 1", got)
				}
				w.send("the new handshake's ACK", tp.up(packet.Seg{Seq: clientFINEnd + 1_000_001, Ack: 1, Flags: packet.ACK}), verdictPass, "")
				if err := h.dp.Insert(spec); err != nil {
					t.Fatalf("splicing the new connection: %v", err)
				}
				if st := h.stats(spec.A); st.Phase != PhaseSpliced || st.Up.FIN || st.Down.FIN {
					t.Errorf("the new pair: %+v", st)
				}
				h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Payload: payload}), verdictRedirect)
			})
		}
	}
}

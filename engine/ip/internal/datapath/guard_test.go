// Blind-injection guards on the real program and the reference: a FIN behind its sender's next byte is dropped and arms no teardown; seq and old acks are bounded by the largest window the other side (or the sender) advertised, not by the widest its scale allows; IPv6 segments of a spliced pair with extension headers are dropped, not passed up to the frozen socket.

package datapath

import (
	"bytes"
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// TestStaleFINArmsNoTeardown: with the server's FIN through and
// acknowledged, a forged client FIN behind the client's next byte (inside
// the old ±65536 << 7 span and the server's window) is dropped as
// stale_fin, and the server's ACK of the whole client stream that follows
// does not complete the teardown. The client's real FIN, and that FIN
// sent again, still pass and end the pair in TIME_WAIT.
func TestStaleFINArmsNoTeardown(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	for _, tp := range []topo{topo4, topo6} {
		spec := h.baseSpec(tp)
		w := newTwin(t, h, spec)
		a := spec.A

		w.send("server FIN", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN, Win: 9}), verdictRedirect, "")
		w.send("client ACK of the server's FIN", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 1, Flags: packet.ACK, Win: 9}), verdictRedirect, "")
		if got := h.stats(a).Phase; got != PhaseACKRelayed1 {
			t.Fatalf("phase %v after the server's FIN and its ACK, want ack_relayed1", got)
		}
		h.events()
		before := h.stats(a)
		w.send("forged client FIN 1000 bytes behind its next", tp.up(packet.Seg{Seq: upNxt - 1000, Ack: upAcked + 1, Flags: packet.ACK | packet.FIN, Win: 9}), verdictDrop, "stale_fin")
		w.send("forged client FIN with data ending behind its next", tp.up(packet.Seg{Seq: upNxt - 100, Ack: upAcked + 1, Flags: packet.ACK | packet.FIN, Win: 9, Payload: make([]byte, 10)}), verdictDrop, "stale_fin")
		sameStats(t, "forged FINs", before, h.stats(a))
		w.send("server ACK of the whole client stream", tp.down(packet.Seg{Seq: downNxt + 1, Ack: upNxt + upOff, Flags: packet.ACK, Win: 9}), verdictRedirect, "")
		if st := h.stats(a); st.Phase != PhaseACKRelayed1 || st.Up.FIN || st.Up.FINAcked {
			t.Fatalf("after a forged FIN and a full ACK: phase %v, client FIN %v acked %v; want ack_relayed1, no client FIN", st.Phase, st.Up.FIN, st.Up.FINAcked)
		}
		if evs := h.events(); len(evs) != 0 {
			t.Errorf("forged FINs reported %v", kinds(evs))
		}

		w.send("client FIN at its next byte", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 1, Flags: packet.ACK | packet.FIN, Win: 9}), verdictRedirect, "")
		w.send("client FIN again (its receiver may have lost it)", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked + 1, Flags: packet.ACK | packet.FIN, Win: 9}), verdictRedirect, "")
		w.send("client FIN one byte further behind", tp.up(packet.Seg{Seq: upNxt - 1, Ack: upAcked + 1, Flags: packet.ACK | packet.FIN, Win: 9}), verdictDrop, "stale_fin")
		w.send("server ACK of the client's FIN", tp.down(packet.Seg{Seq: downNxt + 1, Ack: upNxt + upOff + 1, Flags: packet.ACK, Win: 9}), verdictRedirect, "")
		if got := h.stats(a).Phase; got != PhaseTimeWait {
			t.Errorf("phase %v after both FINs acknowledged, want time_wait", got)
		}
		h.dp.Delete(a)
		h.events()
	}
}

// TestGuardsUseLargestAdvertisedWindow: both connections scale by 7, so
// the old guards allowed ±65536 << 7 (8 MiB) around the next byte and
// behind what was sent. Once the client advertised at most 1000 << 7
// bytes, the server's segments may lie no further than that from the
// server's next byte; once the server advertised at most 2000 << 7, its
// acks may lag no further than that behind its highest. A smaller window
// later does not narrow the bound: it is the largest advertised.
func TestGuardsUseLargestAdvertisedWindow(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	const cliWnd, srvWnd = 1000 << 7, 2000 << 7
	for _, tp := range []topo{topo4, topo6} {
		spec := h.baseSpec(tp)
		w := newTwin(t, h, spec)
		a := spec.A

		w.send("client ACK, window 1000", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 1000}), verdictRedirect, "")
		w.send("server ACK, window 2000", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Win: 2000}), verdictRedirect, "")
		w.send("client ACK, window 10 (smaller, the largest stays)", tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 10}), verdictRedirect, "")
		if st := h.stats(a); st.Up.MaxWindow != cliWnd || st.Down.MaxWindow != srvWnd {
			t.Fatalf("largest windows: client %d server %d, want %d and %d", st.Up.MaxWindow, st.Down.MaxWindow, cliWnd, srvWnd)
		}

		before := h.stats(a)
		w.send("server data behind its next by the client's largest window + 1", tp.down(packet.Seg{Seq: downNxt - cliWnd - 1, Ack: upNxt + upOff, Flags: packet.ACK, Win: 2000, Payload: payload}), verdictDrop, "seq_out_of_window")
		w.send("server reset behind its next by 1 MiB", tp.down(packet.Seg{Seq: downNxt - 1<<20, Ack: upNxt + upOff, Flags: packet.ACK | packet.RST}), verdictDrop, "seq_out_of_window")
		w.send("server bare ACK ahead of its next by the client's largest window + 1", tp.down(packet.Seg{Seq: downNxt + cliWnd + 1, Ack: upNxt + upOff, Flags: packet.ACK, Win: 2000}), verdictDrop, "seq_out_of_window")
		w.send("server ACK older than its highest by its largest window + 1", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff - srvWnd - 1, Flags: packet.ACK, Win: 2000}), verdictDrop, "ack_out_of_window")
		sameStats(t, "segments past the largest windows", before, h.stats(a))

		w.send("server data behind its next by exactly the client's largest window", tp.down(packet.Seg{Seq: downNxt - cliWnd, Ack: upNxt + upOff, Flags: packet.ACK, Win: 2000, Payload: payload}), verdictRedirect, "")
		w.send("server ACK older than its highest by exactly its largest window", tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff - srvWnd, Flags: packet.ACK, Win: 2000}), verdictRedirect, "")
		h.dp.Delete(a)
	}
}

// v6Ext is the base pair's IPv6 segment s with extension headers ext.
func v6Ext(s packet.Seg, ext ...packet.Ext6) packet.Seg {
	s.Ext6 = ext
	return s
}

// TestIPv6ExtensionHeaders: a segment of a spliced pair behind extension
// headers is dropped (ipv6_ext_header, or fragment for a first fragment),
// leaving the pair as it was, where it used to be passed up to the
// forwarder's frozen socket; a chain longer than the program walks is
// dropped whatever its flow. Another flow's segment with extension
// headers still passes untouched.
func TestIPv6ExtensionHeaders(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 16})
	tp := topo6
	spec := h.baseSpec(tp)
	w := newTwin(t, h, spec)
	a := spec.A
	data := packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 9, Payload: payload}
	dstOpts := packet.ExtOpts6(packet.DestOpts)
	long := make([]packet.Ext6, 9)
	for i := range long {
		long[i] = dstOpts
	}

	before := h.stats(a)
	w.send("client data behind a destination options header", tp.up(v6Ext(data, dstOpts)), verdictDrop, "ipv6_ext_header")
	w.send("client FIN behind a hop-by-hop header", tp.up(v6Ext(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN, Win: 9}, packet.ExtOpts6(packet.HopByHop))), verdictDrop, "ipv6_ext_header")
	w.send("server reset at its next byte behind hop-by-hop and destination options", tp.down(v6Ext(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK | packet.RST}, packet.ExtOpts6(packet.HopByHop), dstOpts)), verdictDrop, "ipv6_ext_header")
	w.send("client data in a first fragment", tp.up(v6Ext(data, packet.ExtFrag6(0, true))), verdictDrop, "fragment")
	w.send("client data in an atomic fragment", tp.up(v6Ext(data, dstOpts, packet.ExtFrag6(0, false))), verdictDrop, "fragment")
	w.send("client data behind 8 extension headers", tp.up(v6Ext(data, long[:8]...)), verdictDrop, "ipv6_ext_header")
	w.send("client data behind 9 extension headers", tp.up(v6Ext(data, long...)), verdictDrop, "ipv6_ext_chain")
	sameStats(t, "segments with extension headers", before, h.stats(a))
	w.send("client data without extension headers", tp.up(data), verdictRedirect, "")

	other := tp.withPort(40001)
	for _, c := range []struct {
		what string
		seg  packet.Seg
	}{
		{"another flow behind a destination options header", other.up(v6Ext(data, dstOpts))},
		{"another flow in a first fragment", other.up(v6Ext(data, packet.ExtFrag6(0, true)))},
		{"a later fragment of the spliced flow (no TCP header to match)", tp.up(v6Ext(data, packet.ExtFrag6(100, false)))},
	} {
		in := c.seg.Bytes()
		before := h.drops()
		v, out := h.run(in)
		rv, _ := w.ref.run(in, h.deviceOf(in))
		if v != verdictPass || rv != verdictPass {
			t.Errorf("%s: program verdict %d, reference %d, want pass", c.what, v, rv)
		}
		if d := dropDelta(before, h.drops()); d != "" {
			t.Errorf("%s: counted as %s", c.what, d)
		}
		if !bytes.Equal(out, in) {
			t.Errorf("%s: passed frame was modified", c.what)
		}
	}
}

// Lab test of a splice that finds segments past a hole in a forwarder socket: it falls back, since no socket option reads them and their sender has them acknowledged selectively.

package ip

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// TestEngineFallsBackWithOutOfOrderSegments: a segment 1000 bytes past the
// client's next byte, sent on the client's 4-tuple, waits in the
// forwarder's out-of-order queue (and the forwarder SACKs it). Splice
// falls back naming that queue and counts it, the datapath holds nothing, and the
// connections work on. A splice would have left the segment where
// nothing reads it, and the receiver short of it until its sender
// doubted its SACKs.
func TestEngineFallsBackWithOutOfOrderSegments(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	if el.e.clocks.reader == nil {
		t.Skip("no socket reader: out-of-order segments cannot be seen")
	}
	lp := el.pair(t, "")
	if _, err := lp.client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReadFull(t, lp.p.Client, 5); string(got) != "hello" {
		t.Fatalf("the forwarder read %q", got)
	}
	sendPastAHole(t, el, lp, 1000, []byte("past a hole"))
	_, err := el.e.Splice(context.Background(), lp.p, engine.Both(0))
	if !engine.IsFallback(err) || !strings.Contains(err.Error(), "out-of-order") {
		t.Fatalf("Splice with a segment out of order returned %v, want a fallback naming it", err)
	}
	if n := el.e.Counters()["out_of_order_refused"]; n != 1 {
		t.Errorf("out_of_order_refused counted %d, want 1", n)
	}
	el.workOnAfterFallback(t, lp)
}

// sendPastAHole sends payload on the client's 4-tuple, gap bytes past
// the client's next one, with the client's acknowledgment, from a raw
// socket in the client's namespace.
func sendPastAHole(tb testing.TB, el *engineLab, lp labPair, gap uint32, payload []byte) {
	tb.Helper()
	st, err := tcprepair.Freeze(lp.client)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tcprepair.Thaw(lp.client); err != nil {
		tb.Fatal(err)
	}
	client := netip.MustParseAddrPort(lp.client.LocalAddr().String())
	fwd := netip.MustParseAddrPort(lp.client.RemoteAddr().String())
	clock, err := tcprepair.TSClock(lp.client)
	if err != nil {
		tb.Fatal(err)
	}
	// The client's TSvals may run ahead of its clock by a pacing delay
	// (EDT): one a second ahead passes PAWS, and a segment past a hole
	// does not become the socket's ts_recent.
	f := segFields{ack: st.Params.RcvNxt, win: 1000, ts: true, tsVal: clock + 1000}
	el.sendFromClient(tb, fwd.Addr(), buildSegment(make([]byte, 128), client, fwd, st.SndNxt+gap, f, payload))
	testenv.Eventually(tb, "the segment in the forwarder's out-of-order queue", func() bool {
		info, err := sockopt.TCPInfo(lp.p.Client)
		return err == nil && info.Rcv_ooopack > 0
	})
}

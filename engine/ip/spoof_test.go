// Lab test of the datapath's guards on a pair spliced by the engine: blind resets, data and acks with numbers out of the window, and a SYN on the spliced tuple, injected from the client's namespace with a raw socket, never reach the server and are counted.

package ip

import (
	"context"
	"net/netip"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// TestEngineDropsSpoofedSegments: segments forged on the client's 4-tuple
// (a reset and data a quarter of the sequence space away, data acking
// bytes never sent, a SYN) are dropped under their reasons; the server
// sees neither a reset nor a forged byte, and the pair carries on.
func TestEngineDropsSpoofedSegments(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	lp := el.pair(t, "")
	done := el.splice(t, context.Background(), lp, engine.Both(0))
	if _, err := lp.client.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := testenv.ReadFull(t, lp.server, 5); string(got) != "hello" {
		t.Fatalf("server read %q", got)
	}
	client := netip.MustParseAddrPort(lp.client.LocalAddr().String())
	fwd := netip.MustParseAddrPort(lp.client.RemoteAddr().String())
	st, err := el.e.dp.Lookup(datapath.Tuple{Src: client, Dst: fwd})
	if err != nil {
		t.Fatal(err)
	}
	seq, ack := st.Up.SndNxt, st.Up.AckHi
	far := uint32(1 << 30)
	forged := []struct {
		name   string
		seq    uint32
		f      segFields
		reason string
	}{
		{"blind reset", seq + far, segFields{ack: ack, flags: 0x14}, "seq_out_of_window"},
		{"blind data", seq + far, segFields{ack: ack}, "seq_out_of_window"},
		{"data acking the future", seq, segFields{ack: ack + far}, "ack_out_of_window"},
		{"reset acking the future", seq, segFields{ack: ack + far, flags: 0x14}, "ack_out_of_window"},
		{"syn", seq + 12345, segFields{flags: 0x02}, "syn_on_spliced"},
	}
	before, _ := el.e.dp.Drops()
	want := map[string]uint64{}
	var pkts [][]byte
	for _, g := range forged {
		g.f.win = 1000
		pkts = append(pkts, buildSegment(make([]byte, 128), client, fwd, g.seq, g.f, []byte("forged")))
		want[g.reason]++
	}
	el.sendFromClient(t, fwd.Addr(), pkts...)
	testenv.Eventually(t, "the forged segments counted", func() bool {
		after, _ := el.e.dp.Drops()
		for r, n := range want {
			if after[r]-before[r] < n {
				return false
			}
		}
		return true
	})
	after, _ := el.e.dp.Drops()
	for r, n := range want {
		if d := after[r] - before[r]; d != n {
			t.Errorf("%s: %d drops, want %d", r, d, n)
		}
	}
	// The server got no forged byte and no reset: the next bytes it reads
	// are the client's, and the pair closes cleanly.
	lp.client.Write([]byte(" world"))
	lp.client.CloseWrite()
	if got := testenv.ReadAll(t, lp.server); string(got) != " world" {
		t.Fatalf("server read %q after the forged segments, want %q", got, " world")
	}
	lp.server.Write([]byte("bye"))
	lp.server.CloseWrite()
	if got := testenv.ReadAll(t, lp.client); string(got) != "bye" {
		t.Fatalf("client read %q", got)
	}
	result(t, done, engine.EndEOF)
}

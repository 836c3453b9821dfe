// Tests of learning the peers' timestamp clocks: idle pairs are spliced on the clocks their forwarder sockets recorded, without a probe, and the peers accept the translated TSvals.

package ip

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// TestEngineSplicesIdleWithoutProbe: idle pairs with timestamps, IPv4 and
// IPv6, that exchanged a few bytes in control mode a while ago are
// spliced without a single window probe: each peer's clock is the
// ts_recent of the forwarder's socket. The translated clocks jump ahead
// of what the forwarder's sockets sent by the lead and the time since the
// peer's last segment, no more; bytes cross both ways, and neither peer
// refuses a segment as old (TcpExtPAWSEstab unchanged in the client and
// server namespaces).
func TestEngineSplicesIdleWithoutProbe(t *testing.T) {
	const n = 8
	el := newEngineLab(t, Options{MaxPairs: 4 * n})
	if el.e.clocks.reader == nil {
		testenv.SkipOrFail(t, "the peerclock program did not load")
	}
	pawsBefore := [2]uint64{pawsEstab(t, el.l.Client), pawsEstab(t, el.l.Server)}
	lps := make([]labPair, n)
	for i := range lps {
		lps[i] = el.pairOf(t, "", i%2 == 1)
		relayOnce(t, lps[i])
	}
	// The peers' clocks move on past their last segments.
	const idle = 50 * time.Millisecond
	time.Sleep(idle)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, lp := range lps {
		var clock [4]uint32 // client, forwarder's client side, forwarder's upstream side, server
		for j, c := range []*net.TCPConn{lp.client, lp.p.Client, lp.p.Upstream(), lp.server} {
			var err error
			if clock[j], err = tcprepair.TSClock(c); err != nil {
				t.Fatal(err)
			}
		}
		el.splice(t, ctx, lp, engine.Both(0))
		for _, d := range []struct {
			dir            engine.Direction
			sender, fwdOut uint32
		}{{engine.Up, clock[0], clock[2]}, {engine.Down, clock[3], clock[1]}} {
			_, tsOff, err := el.e.dp.Offsets(tupleA(t, lp), d.dir)
			if err != nil {
				t.Fatal(err)
			}
			// What the sender's next segment carries, translated, beyond
			// what the forwarder's output socket last sent and the lead.
			jump := time.Duration(int32(d.sender+tsOff-d.fwdOut-tsLead(false))) * time.Millisecond
			if jump < -5*time.Millisecond || jump > idle+time.Second {
				t.Errorf("pair %d %v: translated clock %v ahead of the forwarder's after the lead, want about %v", i, d.dir, jump, idle)
			}
		}
	}
	for _, lp := range lps {
		echoOnce(t, lp)
		echoOnce(t, lp)
	}
	c := el.e.Counters()
	if c["clock_probes"] != 0 || c["clocks_read"] != 2*n {
		t.Errorf("clock_probes %d, clocks_read %d; want 0 and %d", c["clock_probes"], c["clocks_read"], 2*n)
	}
	el.checkDrops(t, "seq_out_of_window", "ack_out_of_window", "hold")
	pawsAfter := [2]uint64{pawsEstab(t, el.l.Client), pawsEstab(t, el.l.Server)}
	if pawsAfter != pawsBefore {
		t.Errorf("TcpExtPAWSEstab (client, server) went from %v to %v: a peer refused translated TSvals as old", pawsBefore, pawsAfter)
	}
}

// relayOnce moves a few bytes each way through the forwarder's sockets in
// control mode, as a proxy would.
func relayOnce(tb testing.TB, lp labPair) {
	tb.Helper()
	for _, hop := range [][4]*net.TCPConn{{lp.client, lp.p.Client, lp.p.Upstream(), lp.server}, {lp.server, lp.p.Upstream(), lp.p.Client, lp.client}} {
		if _, err := hop[0].Write([]byte("hi")); err != nil {
			tb.Fatal(err)
		}
		if _, err := hop[2].Write(testenv.ReadFull(tb, hop[1], 2)); err != nil {
			tb.Fatal(err)
		}
		testenv.ReadFull(tb, hop[3], 2)
	}
}

// tupleA is the pair's A tuple, as the datapath names it.
func tupleA(tb testing.TB, lp labPair) datapath.Tuple {
	tb.Helper()
	local, remote, err := tcprepair.Addrs(lp.p.Client)
	if err != nil {
		tb.Fatal(err)
	}
	return datapath.Tuple{Src: remote, Dst: local}
}

// pawsEstab reads TcpExtPAWSEstab (segments an established socket dropped
// for a TSval older than its ts_recent) of a namespace.
func pawsEstab(tb testing.TB, ns *lab.NS) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	out, err := ns.Command(ctx, "nstat", "-asz", "TcpExtPAWSEstab").Output()
	if err != nil {
		tb.Fatalf("nstat in %s: %v", ns.Name, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "TcpExtPAWSEstab" {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return v
		}
	}
	tb.Fatalf("nstat in %s printed no TcpExtPAWSEstab: %q", ns.Name, out)
	return 0
}

// TestEngineSplicesProbing: a peer whose socket's clock is not taken is
// probed, alone (the other clock read from its socket) or with the other
// one (the order without peerclock: freeze and probe before the grace
// period); the pairs carry bytes both ways and no peer refuses a
// translated TSval.
func TestEngineSplicesProbing(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	if el.e.clocks.reader == nil {
		testenv.SkipOrFail(t, "the peerclock program did not load")
	}
	pawsBefore := [2]uint64{pawsEstab(t, el.l.Client), pawsEstab(t, el.l.Server)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []struct {
		probe        [2]bool
		probes, read uint64 // per pair
	}{{[2]bool{true, false}, 1, 1}, {[2]bool{false, true}, 1, 1}, {[2]bool{true, true}, 2, 0}} {
		el.e.clocks.probe = c.probe
		before := el.e.Counters()
		for _, v6 := range []bool{false, true} {
			lp := el.pairOf(t, "", v6)
			relayOnce(t, lp)
			time.Sleep(20 * time.Millisecond)
			el.splice(t, ctx, lp, engine.Both(0))
			echoOnce(t, lp)
			echoOnce(t, lp)
		}
		after := el.e.Counters()
		if probes, read := after["clock_probes"]-before["clock_probes"], after["clocks_read"]-before["clocks_read"]; probes != 2*c.probes || read != 2*c.read {
			t.Errorf("probing %v: %d probes, %d clocks read; want %d and %d", c.probe, probes, read, 2*c.probes, 2*c.read)
		}
	}
	el.checkDrops(t, "seq_out_of_window", "ack_out_of_window")
	if pawsAfter := [2]uint64{pawsEstab(t, el.l.Client), pawsEstab(t, el.l.Server)}; pawsAfter != pawsBefore {
		t.Errorf("TcpExtPAWSEstab (client, server) went from %v to %v", pawsBefore, pawsAfter)
	}
}

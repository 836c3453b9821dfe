// Lab test of the local port range of engine ip: a pair spliced until it closes keeps no socket, and its port goes to no new connection to the same server while the datapath holds the pair.

package forwarder_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestLabSplicedPairKeepsItsPort: with engines.ip.local_ports 45000-45001
// (two ports) and a 4 s datapath TIME_WAIT, the range is reserved in the
// forwarder namespace from the first splice on and given back after the
// forwarder's shutdown. A
// pair spliced by ip is dialled from the range and keeps no descriptor in
// the process once spliced; bytes cross it intact both ways. A second
// pair gets the other port; a third, with one port spliced and the other
// in the datapath's TIME_WAIT, gets a kernel port outside the range
// (and still works), which is reserved while it is spliced, with no
// descriptor kept for it (unless that pair comes more than a second
// after the first ended: its port may then be taken again). Once the
// TIME_WAIT is swept, the range serves again.
func TestLabSplicedPairKeepsItsPort(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	t.Cleanup(func() { // runs after the forwarder's shutdown
		if got := reservedPorts(t, l); got != "" {
			t.Errorf("after shutdown the forwarder namespace reserves %q, want nothing", got)
		}
	})
	engines := config.Default().Engines
	engines.IP.LocalPorts = "45000-45001"
	engines.IP.TimeWait = config.Duration(4 * time.Second)
	servers := serverConns(t, l, httplab.ServerAddr(l, 9831))
	lf := startLabForwarderWith(t, l, engines, tcpListener("ports", httplab.FwdAddr(l, 7831), httplab.ServerAddr(l, 9831)))
	lf.requireEngine(t, ip.Name)
	if got := reservedPorts(t, l); got != "" {
		t.Fatalf("the forwarder namespace reserves %q before any splice, want nothing", got)
	}

	c1, s1 := splicedPair(t, lf, servers)
	p1 := upstreamPort(s1)
	if p1 < 45000 || p1 > 45001 {
		t.Fatalf("the upstream connection's local port is %d, not in the range", p1)
	}
	exchangeBothWays(t, c1, s1, 64<<10)
	if got := reservedPorts(t, l); got != "45000-45001" {
		t.Fatalf("the forwarder namespace reserves %q, want 45000-45001", got)
	}
	// The first splice opened what the engine keeps for all pairs (links,
	// raw sockets); from here on the test holds two descriptors per pair,
	// the client's end and the server's, and the forwarder none once the
	// pair is spliced: its two sockets are closed, and no duplicate kept.
	settled := func(what string, want int) {
		t.Helper()
		testenv.EventuallyShowing(t, what, func() bool { return testenv.OpenFDs(t) == want },
			func() string {
				return "open descriptors: " + strconv.Itoa(testenv.OpenFDs(t)) + ", want " + strconv.Itoa(want)
			})
	}
	time.Sleep(100 * time.Millisecond)
	fds := testenv.OpenFDs(t)

	c2, s2 := splicedPair(t, lf, servers)
	if p2 := upstreamPort(s2); p2 == p1 || p2 < 45000 || p2 > 45001 {
		t.Fatalf("the second pair got port %d beside the first's %d", p2, p1)
	}
	settled("no descriptor kept for a pair dialled from the range", fds+2)
	exchangeBothWays(t, c2, s2, 1000)

	// The first pair ends: the client closes, then the server; the
	// datapath holds it in TIME_WAIT.
	c1.CloseWrite()
	if _, err := io.ReadAll(s1); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	readAll(t, c1)
	ended := time.Now()
	lf.waitClosed(t, "ports", "eof", 1)

	fds = testenv.OpenFDs(t)
	c3, s3 := splicedPair(t, lf, servers)
	if p3 := upstreamPort(s3); p3 >= 45000 && p3 <= 45001 {
		if p3 == p1 && time.Since(ended) >= time.Second {
			// A loaded machine took over a second: the TIME_WAIT port
			// was taken again, as it may be by then.
			t.Skipf("the third pair was dialled %v after the first ended and took its port again", time.Since(ended))
		}
		t.Fatalf("the third pair got port %d from the range while one port is spliced and the other (%d) in TIME_WAIT", p3, p1)
	}
	// Its port is the kernel's: the engine reserves it too while the
	// pair is spliced, and keeps no descriptor for it.
	p3 := upstreamPort(s3)
	settled("no descriptor kept for a pair dialled from a kernel port", fds+2)
	if got := reservedPorts(t, l); !portListHas(got, 45000) || !portListHas(got, 45001) || !portListHas(got, p3) {
		t.Errorf("with the third pair spliced the forwarder namespace reserves %q, want 45000-45001 and %d", got, p3)
	}
	exchangeBothWays(t, c3, s3, 1000)

	// Past TIME_WAIT (4 s) and the next sweep, the first port is free.
	time.Sleep(6 * time.Second)
	_, s4 := splicedPair(t, lf, servers)
	if p4 := upstreamPort(s4); p4 != p1 {
		t.Errorf("after the first pair's TIME_WAIT a new pair got port %d, want %d again", p4, p1)
	}
}

// splicedPair connects a client through lf's listener "ports" and waits
// until every pair of it is spliced by ip; it returns the client's end and
// the server's.
func splicedPair(tb testing.TB, lf *labForwarder, servers <-chan *net.TCPConn) (*net.TCPConn, *net.TCPConn) {
	tb.Helper()
	c := httplab.Dial(tb, lf.Lab, lf.Addr("ports").String())
	s := accept(tb, servers)
	testenv.EventuallyShowing(tb, "every open pair spliced by ip", func() bool {
		flows, err := lf.flows()
		if err != nil {
			return false
		}
		for _, f := range flows {
			if f.State != "spliced" || f.Engine != ip.Name {
				return false
			}
		}
		return len(flows) > 0
	}, func() string { flows, _ := lf.flows(); return flowsString(flows) })
	return c, s
}

func flowsString(flows []forwarder.Flow) string {
	var b strings.Builder
	for _, f := range flows {
		b.WriteString(f.Engine + " " + f.State + " " + f.Note + "; ")
	}
	return b.String()
}

// upstreamPort is the forwarder's local port of the upstream connection
// whose server end is s.
func upstreamPort(s *net.TCPConn) int { return s.RemoteAddr().(*net.TCPAddr).Port }

// exchangeBothWays sends n random bytes each way between the client and server
// ends of a pair and checks they arrive intact.
func exchangeBothWays(tb testing.TB, c, s *net.TCPConn, n int) {
	tb.Helper()
	for _, d := range []struct{ from, to *net.TCPConn }{{c, s}, {s, c}} {
		msg := make([]byte, n)
		rand.Read(msg)
		writeAsync(tb, d.from, msg, false)
		if got := readFull(tb, d.to, n); !bytes.Equal(got, msg) {
			tb.Fatalf("%d bytes arrived changed", n)
		}
	}
}

// reservedPorts is net.ipv4.ip_local_reserved_ports in l's forwarder namespace.
func reservedPorts(tb testing.TB, l *lab.Lab) string {
	tb.Helper()
	var v []byte
	if err := l.Fwd.Do(func() (err error) {
		v, err = os.ReadFile("/proc/sys/net/ipv4/ip_local_reserved_ports")
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// portListHas reports whether the sysctl's port list v ("1,3-5") has p.
func portListHas(v string, p int) bool {
	for _, item := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		a, _ := strconv.Atoi(lo)
		b := a
		if isRange {
			b, _ = strconv.Atoi(hi)
		}
		if p >= a && p <= b {
			return true
		}
	}
	return false
}

// TestLabFullRangeFallsBackToKernelPorts: with engines.ip.local_ports
// 45100-45101 and pairs held in control mode (their sockets keep their
// ports), a third connection to the same server finds both ports in use
// (EADDRNOTAVAIL at connect) and leaves from a kernel port outside the
// range: the range takes no connections away.
func TestLabFullRangeFallsBackToKernelPorts(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	engines := config.Default().Engines
	engines.IP.LocalPorts = "45100-45101"
	servers := serverConns(t, l, httplab.ServerAddr(l, 9832))
	lc := tcpListener("ports", httplab.FwdAddr(l, 7832), httplab.ServerAddr(l, 9832))
	lc.SpliceAfter = config.Duration(time.Hour)
	lf := startLabForwarderWith(t, l, engines, lc)
	lf.requireEngine(t, ip.Name)
	var got []int
	var ends []*net.TCPConn
	for i := range 3 {
		c := httplab.Dial(t, lf.Lab, lf.Addr("ports").String())
		s := accept(t, servers)
		got = append(got, upstreamPort(s))
		exchangeBothWays(t, c, s, 100+i)
		ends = append(ends, c, s)
	}
	defer func() { // the pairs end at once, not at the forwarder's shutdown
		for _, c := range ends {
			c.Close()
		}
		lf.waitClosed(t, "ports", "eof", 3)
	}()
	for i, p := range got[:2] {
		if p < 45100 || p > 45101 {
			t.Errorf("connection %d left from port %d, not from the range", i, p)
		}
	}
	if got[0] == got[1] {
		t.Errorf("two connections to one server from port %d", got[0])
	}
	if p := got[2]; p >= 45100 && p <= 45101 {
		t.Errorf("the third connection left from port %d of a range whose ports are in use", p)
	}
}

// TestLabRangePortTakenAgainInTimeWait: with engines.ip.local_ports of
// 64 ports and the default 60 s TIME_WAIT, 200 pairs to one server one
// after another (at most one every 25 ms, so a port comes round after
// more than a second) all leave from the range: a port whose pair is in
// the datapath's TIME_WAIT, quiet for a second, is taken again, as the
// kernel's tcp_tw_reuse takes its own. The server closes first, so its
// kernel holds each old connection in TIME_WAIT and takes the new SYN
// for its newer TSval. Every pair is spliced by ip, bytes cross both ways
// intact, no pick is refused (local_ports_exhausted), nothing falls back,
// the process keeps no descriptor per pair, and the server namespace
// refuses no segment for its timestamp (its PAWS counters unchanged).
// Before, the 65th pair took a kernel port.
func TestLabRangePortTakenAgainInTimeWait(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	const low, high, pairs = 45200, 45263, 200
	engines := config.Default().Engines
	engines.IP.LocalPorts = strconv.Itoa(low) + "-" + strconv.Itoa(high)
	servers := serverConns(t, l, httplab.ServerAddr(l, 9833))
	lf := startLabForwarderWith(t, l, engines, tcpListener("ports", httplab.FwdAddr(l, 7833), httplab.ServerAddr(l, 9833)))
	lf.requireEngine(t, ip.Name)
	pawsBefore := pawsCounters(t, l.Server)
	var fds int
	used := map[int]int{}
	for i := range pairs {
		start := time.Now()
		c, s := splicedPair(t, lf, servers)
		p := upstreamPort(s)
		if p < low || p > high {
			t.Fatalf("pair %d left from port %d, outside the range %d-%d (%d pairs so far on %d ports)", i, p, low, high, i, len(used))
		}
		used[p]++
		exchangeBothWays(t, c, s, 1000+i)
		// The server closes first: its kernel keeps the TIME_WAIT.
		s.CloseWrite()
		readAll(t, c)
		c.Close()
		readAll(t, s)
		s.Close()
		if i == 9 {
			fds = testenv.OpenFDs(t)
		}
		time.Sleep(25*time.Millisecond - time.Since(start))
	}
	lf.waitClosed(t, "ports", "eof", pairs)
	if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", "local_ports_exhausted"); n != 0 {
		t.Errorf("local_ports_exhausted %v, want 0", n)
	}
	// Most of the 136 pairs past the range's 64 ports take a port from
	// TIME_WAIT; a few may find one whose pair left the table another
	// way (a reset ends it at once), more so on a loaded machine.
	if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", "local_ports_reused"); n < (pairs-(high-low+1))/2 {
		t.Errorf("local_ports_reused %v, want at least %d", n, (pairs-(high-low+1))/2)
	}
	if n := forwarder.CounterSum(lf.Forwarder, "splicer_fallbacks_total", "", ""); n != 0 {
		t.Errorf("splicer_fallbacks_total %v, want 0", n)
	}
	if n := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "eof"); n != pairs {
		t.Errorf("%v pairs spliced by ip to EOF, want %d", n, pairs)
	}
	if n := testenv.OpenFDs(t); n > fds+8 {
		t.Errorf("%d descriptors open after %d pairs, %d after 10: a descriptor kept per pair", n, pairs, fds)
	}
	if after := pawsCounters(t, l.Server); !maps.Equal(after, pawsBefore) {
		t.Errorf("the server namespace's PAWS counters went from %v to %v", pawsBefore, after)
	}
	t.Logf("%d pairs on %d ports of the range", pairs, len(used))
}

// pawsCounters reads the TcpExt counters of ns whose names have PAWS
// (segments refused for an old timestamp: established, TIME_WAIT,
// SYN-SENT), the zero ones too.
func pawsCounters(tb testing.TB, ns *lab.NS) map[string]string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	out, err := ns.Command(ctx, "nstat", "-asz").Output()
	if err != nil {
		tb.Fatalf("nstat in %s: %v", ns.Name, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && strings.Contains(f[0], "PAWS") {
			got[f[0]] = f[1]
		}
	}
	if len(got) == 0 {
		tb.Fatalf("nstat in %s printed no PAWS counter: %q", ns.Name, out)
	}
	return got
}

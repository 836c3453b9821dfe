// Tests of the allocator and the port sets; Reserve in a throwaway network namespace of the lab.

package ports_test

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip/internal/ports"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestPickSkipsClaimed: picks go round the range; a port claimed toward
// one server is skipped for that server only, and picked again once
// unclaimed; with every port claimed there is none.
func TestPickSkipsClaimed(t *testing.T) {
	a := ports.NewAllocator(ports.Range{Low: 40000, High: 40002})
	s1 := netip.MustParseAddrPort("10.0.0.1:80")
	s2 := netip.MustParseAddrPort("[2001:db8::1]:80")
	var got []uint16
	for range 4 {
		p, ok := a.Pick(s1)
		if !ok {
			t.Fatal("no port in an empty allocator")
		}
		got = append(got, p)
		a.Release(s1, p) // the dial failed: no lease kept
	}
	if want := []uint16{40000, 40001, 40002, 40000}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
	if a.Claim(s1, 39999) {
		t.Error("a port outside the range was claimed")
	}
	for _, p := range []uint16{40001, 40002} {
		if !a.Claim(s1, p) {
			t.Fatalf("port %d not claimed", p)
		}
	}
	for range 3 {
		p, _ := a.Pick(s1)
		if p != 40000 {
			t.Fatalf("picked %d toward a server holding 40001 and 40002", p)
		}
		a.Release(s1, p)
	}
	if p, _ := a.Pick(s2); p != 40001 {
		t.Errorf("toward another server picked %d, want the next port, 40001", p)
	}
	a.Claim(s1, 40000)
	if p, ok := a.Pick(s1); ok {
		t.Errorf("picked %d with every port claimed", p)
	}
	a.Unclaim(s1, 40002)
	if p, ok := a.Pick(s1); !ok || p != 40002 {
		t.Errorf("after unclaiming 40002 picked %d %v", p, ok)
	}
	if n := a.Claimed(); n != 2 {
		t.Errorf("%d claims held, want 2", n)
	}
}

func TestSetRoundTrip(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"\n":             "",
		"5":              "5",
		"1-3,5, 7-7,8\n": "1-3,5,7-8",
		"65535,0":        "0,65535",
	} {
		s, err := ports.ParseSet(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := s.String(); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"1000-99", "x", "70000", "1,,2"} {
		if _, err := ports.ParseSet(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	a, _ := ports.ParseSet("1-10")
	b, _ := ports.ParseSet("5-20")
	a.Union(&b)
	if a.String() != "1-20" || a.Len() != 20 {
		t.Errorf("union %v (%d)", a.String(), a.Len())
	}
	a.Minus(&b)
	if a.String() != "1-4" {
		t.Errorf("minus %v", a.String())
	}
}

// TestReserveInNamespace: in the lab's forwarder namespace Reserve adds
// the range to what was reserved there, the host's namespace is
// untouched, and Release takes out only what Reserve added; a range
// reserved already is left as it is.
func TestReserveInNamespace(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	read := func() string {
		t.Helper()
		var v string
		if err := l.Fwd.Do(func() error {
			b, err := os.ReadFile(ports.SysctlPath)
			v = string(b)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	host, err := os.ReadFile(ports.SysctlPath)
	if err != nil {
		testenv.SkipOrFail(t, err.Error())
	}
	if err := l.Fwd.Sysctl("net.ipv4.ip_local_reserved_ports", "100,45000-45010"); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "run", "reserved")
	res, err := ports.Reserve(ports.Range{Low: 45005, High: 45020}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100,45000-45020\n" {
		t.Errorf("reserved: %q", got)
	}
	if now, _ := os.ReadFile(ports.SysctlPath); string(now) != string(host) {
		t.Errorf("the host's reserved ports changed: %q -> %q", host, now)
	}
	if err := l.Fwd.Sysctl("net.ipv4.ip_local_reserved_ports", "100,45000-45020,50000"); err != nil {
		t.Fatal(err)
	}
	if err := res.Release(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100,45000-45010,50000\n" {
		t.Errorf("released: %q", got)
	}
	again, err := ports.Reserve(ports.Range{Low: 45000, High: 45010}, l.Fwd.Do, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100,45000-45010,50000\n" {
		t.Errorf("a range reserved beforehand, released: %q", got)
	}

	// A process that hands its range over (an upgrade's old one) leaves
	// it reserved and recorded: the next process releases it.
	old, err := ports.Reserve(ports.Range{Low: 46000, High: 46009}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Handover(); err != nil {
		t.Fatal(err)
	}
	next, err := ports.Reserve(ports.Range{Low: 46000, High: 46009}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Release(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100,45000-45010,50000\n" {
		t.Errorf("the next process released: %q", got)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the record outlives its takeover: %v", err)
	}

	// The new process of an upgrade reserves before the old one hands
	// over (finding the range reserved, it adds nothing): it still gives
	// back what the old one recorded.
	old, err = ports.Reserve(ports.Range{Low: 47000, High: 47009}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	next, err = ports.Reserve(ports.Range{Low: 47000, High: 47009}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Handover(); err != nil {
		t.Fatal(err)
	}
	if err := next.Release(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "100,45000-45010,50000\n" {
		t.Errorf("the new process released: %q", got)
	}
	if _, err := os.Stat(filepath.Dir(state)); !os.IsNotExist(err) {
		t.Errorf("the record's directory outlives the release: %v", err)
	}
}

// TestPickExhaustedAtOnce: with every port of engines.ip.local_ports'
// default range (20,000) claimed toward a server, as tens of thousands of
// spliced pairs in TIME_WAIT leave it, Pick says so without looking at
// the ports (the dial then takes a kernel port at once), and counts it;
// another server still gets a port.
func TestPickExhaustedAtOnce(t *testing.T) {
	a := ports.NewAllocator(fullRange)
	s := netip.MustParseAddrPort("10.99.2.2:5201")
	claimAll(t, a, s)
	before := a.Probes()
	for range 10 {
		if p, ok := a.Pick(s); ok {
			t.Fatalf("picked %d of an exhausted range", p)
		}
	}
	if n := a.Probes() - before; n > 0 {
		t.Errorf("10 picks of an exhausted range of %d ports examined %d ports or words, want none", fullRange.Len(), n)
	}
	if n := a.Exhausted(); n != 10 {
		t.Errorf("%d picks counted as exhausted, want 10", n)
	}
	if _, ok := a.Pick(netip.MustParseAddrPort("10.99.2.3:5201")); !ok {
		t.Error("no port toward another server")
	}
}

// TestPickFreedPortAtOnce: once one port of an exhausted range is
// unclaimed, the next pick returns it, having examined at most a word of
// the bitmap per 64 ports (not the 20,000 ports one by one); claimed
// again, the range is exhausted again.
func TestPickFreedPortAtOnce(t *testing.T) {
	a := ports.NewAllocator(fullRange)
	s := netip.MustParseAddrPort("10.99.2.2:5201")
	claimAll(t, a, s)
	for _, free := range []uint16{fullRange.Low, 50000, fullRange.High} {
		a.Unclaim(s, free)
		for range 3 {
			before := a.Probes()
			p, ok := a.Pick(s)
			if !ok || p != free {
				t.Fatalf("with only %d free picked %d %v", free, p, ok)
			}
			a.Release(s, p)
			if n, most := a.Probes()-before, fullRange.Len()/64+2; n > most {
				t.Errorf("picking the one free port %d examined %d ports or words, want at most %d", free, n, most)
			}
		}
		a.Claim(s, free)
		if p, ok := a.Pick(s); ok {
			t.Fatalf("picked %d with %d claimed again", p, free)
		}
	}
}

// TestPickMatchesWalk: through random claims, unclaims and other
// processes' ports toward a few servers, over ranges whose busy ports
// stay few (a map) or grow many (a bitmap, with a partial last word),
// every pick is the port a walk of the range from the same place finds,
// exhaustion is reported exactly when every port is busy, and no pick
// examines more than a word per 64 ports of the range.
func TestPickMatchesWalk(t *testing.T) {
	servers := []netip.AddrPort{
		netip.MustParseAddrPort("10.0.0.1:80"),
		netip.MustParseAddrPort("[::ffff:10.0.0.1]:81"),
		netip.MustParseAddrPort("[2001:db8::1]:80"),
	}
	for _, r := range []ports.Range{{Low: 1000, High: 1000}, {Low: 1000, High: 1069}, {Low: 65000, High: 65535}, {Low: 40000, High: 43999}} {
		rng := rand.New(rand.NewPCG(uint64(r.Low), uint64(r.High)))
		a := ports.NewAllocator(r)
		claimed := map[ports.Use]bool{}
		others := map[ports.Use]bool{}
		next := r.Low
		for step := range 20000 {
			u := ports.Use{Server: servers[rng.IntN(len(servers))], Local: r.Low + uint16(rng.IntN(r.Len()))}
			switch op := rng.IntN(10); {
			case op < 4:
				a.Claim(u.Server, u.Local)
				claimed[u] = true
			case op < 6:
				a.Unclaim(u.Server, u.Local)
				delete(claimed, u)
			case op == 6 && step%50 == 0:
				var uses []ports.Use
				clear(others)
				for range rng.IntN(r.Len()) {
					o := ports.Use{Server: servers[rng.IntN(len(servers))], Local: r.Low + uint16(rng.IntN(r.Len()))}
					uses, others[o] = append(uses, o), true
				}
				a.SetOthers(uses)
			default:
				want, wantOK := uint16(0), false
				for i := range r.Len() {
					p := r.Low + uint16((int(next-r.Low)+i)%r.Len())
					if !claimed[ports.Use{Server: u.Server, Local: p}] && !others[ports.Use{Server: u.Server, Local: p}] {
						want, wantOK = p, true
						next = r.Low + uint16((int(p-r.Low)+1)%r.Len())
						break
					}
				}
				before := a.Probes()
				got, ok := a.Pick(u.Server)
				if got != want || ok != wantOK {
					t.Fatalf("range %v, step %d: picked %d %v toward %v, a walk finds %d %v", r, step, got, ok, u.Server, want, wantOK)
				}
				a.Release(u.Server, got)
				if n, most := a.Probes()-before, r.Len()/64+2; n > most {
					t.Fatalf("range %v, step %d: a pick examined %d ports or words, want at most %d", r, step, n, most)
				}
			}
		}
	}
}

// TestPickLeasesUntilClosed: a port handed out for a dial is busy toward
// its server until the connection dialled from it is closed, though no
// pair in the table claims it (a pair in control mode: it may be spliced
// and its socket closed before another dial's connect, which would then
// take the spliced pair's 4-tuple); another server gets it meanwhile. A
// dial that failed gives it back at once; one that never reports, after
// PendingLease.
func TestPickLeasesUntilClosed(t *testing.T) {
	a := ports.NewAllocator(ports.Range{Low: 40000, High: 40000})
	s1 := netip.MustParseAddrPort("10.0.0.1:80")
	s2 := netip.MustParseAddrPort("10.0.0.2:80")
	p, ok := a.Pick(s1)
	if !ok {
		t.Fatal("no port in an empty allocator")
	}
	open := true
	a.Dialled(s1, p, func() bool { return open }, ports.Note{})
	if q, ok := a.Pick(s1); ok {
		t.Fatalf("picked %d again toward %v while the connection dialled from it is open", q, s1)
	}
	if q, ok := a.Pick(s2); !ok || q != p {
		t.Errorf("toward another server picked %d %v, want %d", q, ok, p)
	}
	a.Release(s2, p)
	now := time.Now()
	a.Reap(now)
	if _, ok := a.Pick(s1); ok {
		t.Fatal("a reap gave back the port of an open connection")
	}
	open = false
	a.Reap(now)
	q, ok := a.Pick(s1)
	if !ok || q != p {
		t.Fatalf("after the connection closed picked %d %v, want %d", q, ok, p)
	}
	a.Release(s1, q)
	if _, ok := a.Pick(s1); !ok {
		t.Fatal("a released lease still holds the port")
	}
	a.Reap(now.Add(ports.PendingLease - time.Second))
	if _, ok := a.Pick(s1); ok {
		t.Fatal("a lease whose dial never reported was given back early")
	}
	a.Reap(now.Add(ports.PendingLease + time.Second))
	if _, ok := a.Pick(s1); !ok {
		t.Fatal("a lease whose dial never reported was kept past PendingLease")
	}
}

// TestPickReclaims: with every port busy toward a server, Pick asks the
// reclaim function for that server; a port it frees is handed out, and
// the pick is not counted as exhausted; when it frees none, it is.
func TestPickReclaims(t *testing.T) {
	a := ports.NewAllocator(ports.Range{Low: 40000, High: 40001})
	s := netip.MustParseAddrPort("10.0.0.1:80")
	a.Claim(s, 40000)
	a.Claim(s, 40001)
	var asked []netip.AddrPort
	free := true
	a.SetReclaim(func(server netip.AddrPort) bool {
		asked = append(asked, server)
		if !free {
			return false
		}
		a.Unclaim(server, 40001)
		return true
	})
	if p, ok := a.Pick(s); !ok || p != 40001 {
		t.Fatalf("picked %d %v, want the reclaimed 40001", p, ok)
	}
	if n := a.Exhausted(); n != 0 {
		t.Errorf("a reclaimed pick counted as exhausted (%d)", n)
	}
	free = false
	if p, ok := a.Pick(s); ok {
		t.Fatalf("picked %d with nothing reclaimed", p)
	}
	if n := a.Exhausted(); n != 1 {
		t.Errorf("exhausted %d, want 1", n)
	}
	if len(asked) != 2 || asked[0] != s {
		t.Errorf("reclaim asked for %v", asked)
	}
}

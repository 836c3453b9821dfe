// Servers found in DNS: a name's addresses become servers and follow its records, a failed lookup keeps the last ones, SRV records give ports, weights and backups, each address is health checked.

package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// fakeDNS answers lookups from records a test changes.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]string
	srvs  map[string][]*net.SRV
	err   error // every lookup fails with it
}

func (f *fakeDNS) set(host string, ips ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts[host] = ips
}

func (f *fakeDNS) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []netip.Addr
	for _, ip := range f.hosts[host] {
		out = append(out, netip.MustParseAddr(ip))
	}
	if out == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func (f *fakeDNS) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", nil, f.err
	}
	return name, f.srvs[name], nil
}

// resolvingPool is a pool of servers, looked up in dns every interval
// from StartChecks (with dial, if it has a health check) until the test ends.
func resolvingPool(tb testing.TB, dns *fakeDNS, dial CheckDialer, pc config.Pool) *Pool {
	tb.Helper()
	if pc.Resolver == nil {
		pc.Resolver = &config.Resolver{Interval: config.Duration(20 * time.Millisecond)}
	}
	p := NewPool(pc)
	p.groups.lookup = dns
	p.StartChecks(dial, nil)
	tb.Cleanup(func() { p.Close() })
	return p
}

// servers are p's servers now, each as "addr weight backup from".
func serversOf(p *Pool) []string {
	var out []string
	for _, s := range p.Servers() {
		out = append(out, strings.Join([]string{s.Addr, strconv.Itoa(s.Weight), boolWord(s.Backup, "backup"), s.From}, " "))
	}
	return out
}

func boolWord(b bool, word string) string {
	if b {
		return word
	}
	return "-"
}

func TestResolvedNameFollowsItsRecords(t *testing.T) {
	dns := &fakeDNS{hosts: map[string][]string{"web.example": {"10.0.0.2", "10.0.0.1"}}}
	p := resolvingPool(t, dns, nil, config.Pool{Name: "p", Servers: []config.PoolServer{
		{Address: "static.example:81", Weight: 1},
		{Address: "web.example:80", Weight: 2, MaxConns: 5, Resolve: true},
	}})
	want := []string{"static.example:81 1 - ", "10.0.0.1:80 2 - web.example:80", "10.0.0.2:80 2 - web.example:80"}
	if got := serversOf(p); !slices.Equal(got, want) {
		t.Fatalf("servers right after start %q, want %q: each address a server with the entry's weight", got, want)
	}
	if s := p.Servers()[1]; s.MaxConns != 5 {
		t.Errorf("max_conns %d, want the entry's 5", s.MaxConns)
	}
	kept := p.Servers()[2]
	gone := p.Servers()[1]
	if !gone.Hold() {
		t.Fatal("Hold on a server with room")
	}

	dns.set("web.example", "10.0.0.3", "10.0.0.2")
	want = []string{"static.example:81 1 - ", "10.0.0.2:80 2 - web.example:80", "10.0.0.3:80 2 - web.example:80"}
	testenv.Eventually(t, "the new record followed", func() bool { return slices.Equal(serversOf(p), want) })
	if p.Servers()[1] != kept {
		t.Error("10.0.0.2:80, in both records, was made anew: its health, failures and connections would be lost")
	}
	for range 20 {
		if s := p.Pick("", nil); s == gone {
			t.Fatal("Pick took 10.0.0.1:80, gone from the record")
		}
	}
	gone.Release() // its connection ends after it left the pool
}

func TestFailedLookupKeepsLastAddresses(t *testing.T) {
	dns := &fakeDNS{hosts: map[string][]string{"web.example": {"10.0.0.1"}}}
	p := resolvingPool(t, dns, nil, config.Pool{Name: "p", Servers: []config.PoolServer{{Address: "web.example:80", Weight: 1, Resolve: true}}})
	dns.fail(errors.New("server misbehaving"))
	testenv.Eventually(t, "failed lookups counted", func() bool { return p.Resolutions()[0].Failures >= 3 })
	if got := serversOf(p); !slices.Equal(got, []string{"10.0.0.1:80 1 - web.example:80"}) {
		t.Errorf("servers after failed lookups %q, want the last ones kept", got)
	}
	if r := p.Resolutions()[0]; r.Err != "server misbehaving" || !slices.Equal(r.Addresses, []string{"10.0.0.1:80"}) {
		t.Errorf("resolution %+v, want the error and the kept address", r)
	}
	if s := p.Pick("", nil); s == nil || s.Addr != "10.0.0.1:80" {
		t.Errorf("Pick %v, want the kept address", s)
	}

	dns.fail(nil)
	dns.set("web.example") // NXDOMAIN: a name gone for a moment keeps its servers too
	time.Sleep(100 * time.Millisecond)
	if got := serversOf(p); len(got) != 1 {
		t.Errorf("servers while the name is missing %q, want the last one kept", got)
	}
	dns.set("web.example", "10.0.0.9")
	testenv.Eventually(t, "the name followed once it answers again", func() bool {
		return slices.Equal(serversOf(p), []string{"10.0.0.9:80 1 - web.example:80"})
	})
	if r := p.Resolutions()[0]; r.Err != "" {
		t.Errorf("error %q after a lookup that worked, want none", r.Err)
	}
}

func TestSRVServers(t *testing.T) {
	dns := &fakeDNS{
		hosts: map[string][]string{"a.example": {"10.0.0.1"}, "b.example": {"10.0.0.2", "2001:db8::2"}, "c.example": {"10.0.0.3"}},
		srvs: map[string][]*net.SRV{"_http._tcp.web.example": {
			{Target: "a.example.", Port: 8080, Priority: 10, Weight: 3},
			{Target: "b.example.", Port: 8081, Priority: 10, Weight: 0},
			{Target: "c.example.", Port: 8082, Priority: 20, Weight: 1},
			{Target: "gone.example.", Port: 8083, Priority: 10, Weight: 1}, // does not resolve: left out
		}},
	}
	p := resolvingPool(t, dns, nil, config.Pool{Name: "p", Servers: []config.PoolServer{{SRV: "_http._tcp.web.example", Weight: 2}}})
	want := []string{
		"10.0.0.1:8080 6 - _http._tcp.web.example",
		"10.0.0.2:8081 2 - _http._tcp.web.example",
		"10.0.0.3:8082 2 backup _http._tcp.web.example",
		"[2001:db8::2]:8081 2 - _http._tcp.web.example",
	}
	if got := serversOf(p); !slices.Equal(got, want) {
		t.Errorf("servers %q, want %q: the record's port, its weight (0 as 1) times the entry's, a later priority as backup", got, want)
	}
}

func TestResolvedAddressesHealthChecked(t *testing.T) {
	dns := &fakeDNS{hosts: map[string][]string{"web.example": {"10.0.0.1", "10.0.0.2"}}}
	var mu sync.Mutex
	dialled := map[string]int{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialled[addr]++
		mu.Unlock()
		if addr == "10.0.0.2:80" {
			return nil, errors.New("connection refused")
		}
		c, s := net.Pipe()
		go s.Close()
		return c, nil
	}
	count := func(addr string) int { mu.Lock(); defer mu.Unlock(); return dialled[addr] }
	hc := &config.HealthCheck{Interval: config.Duration(10 * time.Millisecond), Timeout: config.Duration(10 * time.Millisecond)}
	p := resolvingPool(t, dns, dial, config.Pool{Name: "p", HealthCheck: hc, Servers: []config.PoolServer{{Address: "web.example:80", Weight: 1, Resolve: true}}})
	testenv.Eventually(t, "10.0.0.2:80 marked unhealthy", func() bool { return !p.Servers()[1].Healthy() })
	if !p.Servers()[0].Healthy() {
		t.Error("10.0.0.1:80, which passes its checks, marked unhealthy")
	}
	if n := count("web.example:80"); n != 0 {
		t.Errorf("the name itself checked %d times, want each address checked", n)
	}

	dns.set("web.example", "10.0.0.1")
	testenv.Eventually(t, "10.0.0.2 gone", func() bool { return len(p.Servers()) == 1 })
	time.Sleep(30 * time.Millisecond) // a check under way ends
	before := count("10.0.0.2:80")
	time.Sleep(100 * time.Millisecond)
	if after := count("10.0.0.2:80"); after != before {
		t.Errorf("10.0.0.2:80 checked %d more times after it left the record", after-before)
	}
}

func TestReloadKeepsAddressesWhenLookupFails(t *testing.T) {
	dns := &fakeDNS{hosts: map[string][]string{"web.example": {"10.0.0.1"}}}
	pc := config.Pool{Name: "p", Servers: []config.PoolServer{{Address: "web.example:80", Weight: 1, Resolve: true}}}
	old := resolvingPool(t, dns, nil, pc)
	old.Drain("10.0.0.1:80", true)
	dns.fail(errors.New("timeout"))
	p := resolvingPool(t, dns, nil, pc)
	if got := serversOf(p); len(got) != 0 {
		t.Fatalf("servers %q before Inherit, want none: the lookup failed", got)
	}
	p.Inherit(old)
	if got := serversOf(p); !slices.Equal(got, []string{"10.0.0.1:80 1 - web.example:80"}) || !p.Servers()[0].Drained() {
		t.Errorf("servers after Inherit %q, want the old pool's address, still drained", got)
	}
}

// Servers found in DNS: a server given by name with resolve (or an SRV name) is looked up every interval, each of its addresses a server of the pool, the last good ones kept when a lookup fails.

package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// lookuper is the part of *net.Resolver the lookups use; tests give their own.
type lookuper interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// lookupTimeout bounds one lookup of a name (its SRV record and its
// targets' addresses), and the interval does too.
const lookupTimeout = 5 * time.Second

// retryUnresolved is how soon a name that never resolved is looked up
// again, whatever the interval: until then it stands for no server.
const retryUnresolved = time.Second

// groups are a pool's configured servers, in order, each with the servers
// it stands for now: one for a server given by address, a name's
// addresses for one that resolves.
type groups struct {
	mu       sync.Mutex // guards each group's servers and lookup state
	list     []*group
	lookup   lookuper
	interval time.Duration
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

// group is one configured server.
type group struct {
	cfg     config.PoolServer
	servers []*Server
	// resolved: a lookup gave addresses once (servers holds the last
	// ones given).
	resolved bool
	failures uint64
	lastErr  error
}

// name is what the group is found under: its host:port or SRV name.
func (g *group) name() string {
	if g.cfg.SRV != "" {
		return g.cfg.SRV
	}
	return g.cfg.Address
}

// init takes r's interval and name servers (r may be nil).
func (gs *groups) init(r *config.Resolver) {
	gs.interval = r.ResolveInterval()
	gs.lookup = newResolver(r.NameserverAddrs())
}

// newResolver asks nameservers in turn, or the system's without any.
func newResolver(nameservers []string) lookuper {
	if len(nameservers) == 0 {
		return net.DefaultResolver
	}
	var next atomic.Uint32
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, nameservers[int(next.Add(1)-1)%len(nameservers)])
	}}
}

// servers are the groups' servers now, in order; gs.mu is held.
func (gs *groups) servers() []*Server {
	var out []*Server
	for _, g := range gs.list {
		out = append(out, g.servers...)
	}
	return out
}

// resolving are the groups looked up in DNS.
func (gs *groups) resolving() []*group {
	return slices.DeleteFunc(slices.Clone(gs.list), func(g *group) bool { return !g.cfg.Resolves() })
}

// start looks every name up once, then again every interval in the
// background until stop; nothing for a pool without names that resolve.
func (gs *groups) start(p *Pool, log *slog.Logger) {
	if len(gs.resolving()) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs.cancel = cancel
	gs.resolveAll(ctx, p, log)
	gs.done.Go(func() {
		for {
			wait := gs.interval
			if !gs.allResolved() {
				wait = min(wait, retryUnresolved)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			gs.resolveAll(ctx, p, log)
		}
	})
}

// stop ends the lookups and waits for them.
func (gs *groups) stop() {
	if gs.cancel != nil {
		gs.cancel()
	}
	gs.done.Wait()
}

func (gs *groups) allResolved() bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for _, g := range gs.list {
		if g.cfg.Resolves() && !g.resolved {
			return false
		}
	}
	return true
}

// resolveAll looks each name up and, if any now has other addresses,
// rebuilds p's set.
func (gs *groups) resolveAll(ctx context.Context, p *Pool, log *slog.Logger) {
	changed := false
	for _, g := range gs.resolving() {
		lctx, cancel := context.WithTimeout(ctx, min(gs.interval, lookupTimeout))
		found, err := lookupGroup(lctx, gs.lookup, g.cfg)
		cancel()
		if ctx.Err() != nil {
			return // stopped: not a failure
		}
		changed = gs.update(p, g, found, err, log) || changed
	}
	if changed {
		p.rebuild()
	}
}

// address is one server a lookup found.
type address struct {
	ap     netip.AddrPort
	host   string // the name it was found under, host:port
	weight int
	backup bool
}

// lookupGroup finds the servers of s, sorted by address: its name's A and
// AAAA addresses, or its SRV record's targets'. No address is an error:
// a name that went missing for a moment must not empty the pool.
func lookupGroup(ctx context.Context, r lookuper, s config.PoolServer) ([]address, error) {
	var found []address
	var err error
	if s.SRV != "" {
		found, err = lookupSRV(ctx, r, s)
	} else {
		host, port, _ := net.SplitHostPort(s.Address) // validated with the configuration
		found, err = lookupHost(ctx, r, host, port, s.Weight, s.Backup)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(found, func(a, b address) int { return a.ap.Compare(b.ap) })
	found = slices.CompactFunc(found, func(a, b address) bool { return a.ap == b.ap })
	if len(found) == 0 {
		return nil, errors.New("no address")
	}
	return found, nil
}

// lookupHost finds host's addresses, each a server at port.
func lookupHost(ctx context.Context, r lookuper, host, port string, weight int, backup bool) ([]address, error) {
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", port, err)
	}
	out := make([]address, 0, len(ips))
	for _, ip := range ips {
		out = append(out, address{ap: netip.AddrPortFrom(ip.Unmap(), uint16(p)), host: net.JoinHostPort(host, port), weight: weight, backup: backup})
	}
	return out, nil
}

// lookupSRV finds the servers of s's SRV record: each target's addresses
// at its port, weighted by its weight (1 to config.MaxWeight) times s's;
// the targets of the lowest priority are the primary servers, the others
// backups. A target that does not resolve is left out.
func lookupSRV(ctx context.Context, r lookuper, s config.PoolServer) ([]address, error) {
	_, recs, err := r.LookupSRV(ctx, "", "", s.SRV)
	if err != nil {
		return nil, err
	}
	recs = slices.DeleteFunc(recs, func(rec *net.SRV) bool { return rec.Target == "." || rec.Target == "" }) // "not available here"
	if len(recs) == 0 {
		return nil, errors.New("no SRV target")
	}
	first := slices.MinFunc(recs, func(a, b *net.SRV) int { return int(a.Priority) - int(b.Priority) }).Priority
	var out []address
	var errs []error
	for _, rec := range recs {
		weight := min(max(int(rec.Weight), 1)*s.Weight, config.MaxWeight)
		target := strings.TrimSuffix(rec.Target, ".")
		found, err := lookupHost(ctx, r, target, strconv.Itoa(int(rec.Port)), weight, s.Backup || rec.Priority > first)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, found...)
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// update gives g the servers found, reusing those at the same address
// (their health, failures and connections carry on), or counts its
// failed lookup, g keeping its last servers. It reports whether g's
// servers changed. A server no longer found leaves the pool's set: it
// gets no new connections, and the ones it has carry on.
func (gs *groups) update(p *Pool, g *group, found []address, err error, log *slog.Logger) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if err != nil {
		g.failures++
		g.lastErr = err
		if g.resolved {
			log.Warn("upstream name lookup failed: its last addresses stay", "pool", p.Name, "name", g.name(), "addresses", addrs(g.servers), "err", err)
		} else {
			log.Warn("upstream name lookup failed: no server for it yet", "pool", p.Name, "name", g.name(), "err", err)
		}
		return false
	}
	g.resolved, g.lastErr = true, nil
	old := make(map[string]*Server, len(g.servers))
	for _, s := range g.servers {
		old[s.Addr] = s
	}
	next := make([]*Server, 0, len(found))
	for _, f := range found {
		addr := f.ap.String()
		o := old[addr]
		if o != nil && o.Weight == f.weight && o.Backup == f.backup {
			next = append(next, o)
			continue
		}
		s := p.newServer(addr, g.name(), f.host, f.weight, f.backup, g.cfg.MaxConns)
		if o != nil { // weight or priority changed
			s.carry(o)
		}
		next = append(next, s)
	}
	if slices.Equal(next, g.servers) {
		return false
	}
	log.Info("upstream name resolved to other addresses", "pool", p.Name, "name", g.name(), "addresses", addrs(next), "were", addrs(g.servers))
	g.servers = next
	return true
}

// carry gives s what o had learnt: health, drain, failures. (Its
// connections stay counted on o, which they release.)
func (s *Server) carry(o *Server) {
	s.healthy.Store(o.healthy.Load())
	s.drained.Store(o.drained.Load())
	s.fails.inherit(&o.fails)
}

// inherit gives each name of gs that has not resolved (its first lookup
// failed) the last addresses of the same name in old, the pool a reload
// replaces: a name server down during a reload must not empty the pool.
// It reports whether any group took them.
func (gs *groups) inherit(p *Pool, old *groups) bool {
	type last struct {
		cfg   config.PoolServer
		addrs []*Server
	}
	var had []last
	old.mu.Lock()
	for _, g := range old.list {
		if g.resolved {
			had = append(had, last{g.cfg, g.servers})
		}
	}
	old.mu.Unlock()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	took := false
	for _, g := range gs.list {
		i := slices.IndexFunc(had, func(l last) bool { return l.cfg == g.cfg })
		if !g.cfg.Resolves() || g.resolved || i < 0 {
			continue
		}
		g.servers = nil
		for _, o := range had[i].addrs {
			g.servers = append(g.servers, p.newServer(o.Addr, o.From, o.host, o.Weight, o.Backup, g.cfg.MaxConns))
		}
		g.resolved, took = true, true
	}
	return took
}

// addrs are servers' addresses, for the log.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}

// Resolution is one name of a pool that resolves: the addresses it
// stands for now, and its failed lookups since the pool began (the last
// one's error while it keeps failing).
type Resolution struct {
	Pool      string
	Name      string
	Addresses []string
	Failures  uint64
	Err       string
}

// Resolutions are the pool's names that resolve, in configuration order.
func (p *Pool) Resolutions() []Resolution {
	p.groups.mu.Lock()
	defer p.groups.mu.Unlock()
	var out []Resolution
	for _, g := range p.groups.list {
		if !g.cfg.Resolves() {
			continue
		}
		r := Resolution{Pool: p.Name, Name: g.name(), Addresses: addrs(g.servers), Failures: g.failures}
		if g.lastErr != nil {
			r.Err = g.lastErr.Error()
		}
		out = append(out, r)
	}
	return out
}

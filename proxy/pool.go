// Pools of upstream servers (an http-reverse pool, a tcp or filter listener's upstream list) and the three ways of picking one: round robin, least connections, consistent hash.

package proxy

import (
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// Server is one server of a pool.
type Server struct {
	Addr string
	// From is the name the address was found under (a server that
	// resolves: host:port, or an SRV name); empty for one given by address.
	From string
	// Weight is the server's share of the pool's picks; 0 takes none.
	Weight int
	// Backup servers are picked only when no other can be.
	Backup bool
	// MaxConns bounds the connections held to it at once (Hold); 0: none.
	MaxConns int64
	healthy  atomic.Bool
	drained  atomic.Bool  // by an operator (Pool.Drain): no new picks
	active   atomic.Int64 // upstream connections held to it (least_conn)
	fails    Failures
	queue    *queue // its pool's, woken when a full server frees a place
	// host is the Host of its health checks where the check names none:
	// the name it was found under (host:port), else Addr.
	host string
}

// Healthy reports whether the last health check passed (always, without checks).
func (s *Server) Healthy() bool { return s.healthy.Load() }

// Drained reports whether an operator drained the server (Pool.Drain).
func (s *Server) Drained() bool { return s.drained.Load() }

// takes reports whether s may be picked: healthy, not drained, not full.
func (s *Server) takes() bool { return s.healthy.Load() && !s.drained.Load() && !s.full() }

// full reports whether s carries MaxConns connections.
func (s *Server) full() bool { return s.MaxConns > 0 && s.active.Load() >= s.MaxConns }

// Hold counts a connection to s (for least_conn and MaxConns) until
// Release, and reports false, counting nothing, when s is full: Pick
// passed it over as full, but another client may have taken the last
// place since.
func (s *Server) Hold() bool {
	if s.MaxConns <= 0 {
		s.active.Add(1)
		return true
	}
	for {
		n := s.active.Load()
		if n >= s.MaxConns {
			return false
		}
		if s.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release ends the count of a connection Hold counted; a client waiting
// in the pool's queue for a place tries again.
func (s *Server) Release() {
	if s.active.Add(-1) == s.MaxConns-1 && s.MaxConns > 0 {
		s.queue.wake()
	}
}

// Pool is a named group of servers and its balancing policy, with the
// servers that fail skipped as Fail says and, given a health check, those
// that fail it not used.
type Pool struct {
	Name    string
	Balance string
	// HashOn is what consistent_hash hashes for an HTTP request
	// (config.Pool.HashOn); the caller computes the key (HashKey).
	HashOn      string
	HealthCheck *config.HealthCheck
	// Fail says when a server that does not connect or answer is skipped.
	Fail config.FailPolicy
	// QueueTimeout is how long a client waits for a place when every
	// server it could use is full (max_conns); 0: refused at once.
	QueueTimeout time.Duration
	// MaxQueue bounds the clients waiting at once; 0: no bound.
	MaxQueue int64
	queue    queue

	// set is what Pick looks at, replaced whole when a name resolves to
	// other addresses.
	set atomic.Pointer[serverSet]
	// groups are the configured servers, each with the servers it
	// stands for now (resolve.go).
	groups groups
	// health runs the servers' health checks, each from when it joins
	// the set to when it leaves it.
	health healthChecks
}

// serverSet is the pool's servers at one time and the orders Pick takes
// them in, built together (buildSet).
type serverSet struct {
	servers []*Server
	// tiers are the servers Pick looks at in turn: the primary ones,
	// then the backups if there are any.
	tiers []tier
	ring  []ringPoint // consistent_hash only, sorted by hash
}

// tier is the servers Pick looks at together: the primary ones, or the
// backups.
type tier struct {
	backup bool
	// turns is round_robin's order: each server as often as its
	// weight, spread out (smoothTurns).
	turns []*Server
	next  atomic.Uint64
}

// ringPoint is one of a server's virtual nodes on the hash ring.
type ringPoint struct {
	hash uint64
	srv  *Server
}

// vnodes is how many points a server of weight 1 has on the ring: enough
// that keys spread evenly and a removed server's keys spread over all the
// others. A server has vnodes times its weight.
const vnodes = 100

// NewPool builds a pool from its configuration; every server starts
// healthy, none is checked, and no name is looked up until StartChecks.
func NewPool(pc config.Pool) *Pool {
	p := &Pool{Name: pc.Name, Balance: pc.Balance, HashOn: pc.HashOn, HealthCheck: pc.HealthCheck, Fail: pc.FailPolicy(),
		QueueTimeout: pc.QueueTimeout.Std(), MaxQueue: int64(pc.MaxQueue)}
	if p.Balance == "" {
		p.Balance = "round_robin"
	}
	p.groups.init(pc.Resolver)
	for _, ps := range pc.Servers {
		g := &group{cfg: ps}
		if !ps.Resolves() {
			g.servers = []*Server{p.newServer(ps.Address, "", ps.Address, ps.Weight, ps.Backup, ps.MaxConns)}
		}
		p.groups.list = append(p.groups.list, g)
	}
	p.rebuild()
	return p
}

// newServer is a server of p, healthy until its checks say otherwise.
func (p *Pool) newServer(addr, from, host string, weight int, backup bool, maxConns int) *Server {
	s := &Server{Addr: addr, From: from, Weight: weight, Backup: backup, MaxConns: int64(maxConns), queue: &p.queue, host: host}
	s.healthy.Store(true)
	return s
}

// Servers are the pool's servers now, in configuration order (a name's
// addresses in their order).
func (p *Pool) Servers() []*Server { return p.set.Load().servers }

// rebuild makes the set Pick looks at from the groups' servers now, has
// the health checks follow it, and has the clients waiting for a place
// pick again (a new server may have room).
func (p *Pool) rebuild() {
	p.groups.mu.Lock()
	defer p.groups.mu.Unlock()
	p.set.Store(buildSet(p.Balance, p.groups.servers()))
	p.health.follow(p.Servers())
	p.queue.wake()
}

// buildSet orders servers for balance.
func buildSet(balance string, servers []*Server) *serverSet {
	set := &serverSet{servers: servers}
	for _, backup := range []bool{false, true} {
		tierServers := slices.DeleteFunc(slices.Clone(servers), func(s *Server) bool { return s.Backup != backup })
		if len(tierServers) > 0 || !backup {
			set.tiers = append(set.tiers, tier{backup: backup, turns: smoothTurns(tierServers)})
		}
	}
	if balance == "consistent_hash" {
		for _, s := range servers {
			for i := range vnodes * s.Weight {
				set.ring = append(set.ring, ringPoint{hash: hash64(s.Addr + "#" + strconv.Itoa(i)), srv: s})
			}
		}
		slices.SortFunc(set.ring, func(a, b ringPoint) int { return cmpUint64(a.hash, b.hash) })
	}
	return set
}

// StartChecks starts the pool's work in the background until Close: the
// lookups of its servers given by name to resolve (the first one before
// it returns, so that the pool starts with their addresses), and its
// health checks, if it has any and a dial to run them with.
func (p *Pool) StartChecks(dial CheckDialer, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if p.HealthCheck != nil && dial != nil {
		p.health.start(*p.HealthCheck, dial, log, p.Name)
		p.health.follow(p.Servers())
	}
	p.groups.start(p, log)
}

// Close ends the lookups and health checks, if any, and waits for them.
func (p *Pool) Close() error {
	p.groups.stop()
	p.health.stop()
	return nil
}

// Drain stops (on) or resumes (!on) picking every server of the pool at
// addr, as HAProxy's "set server state drain" and "ready" do: the
// connections and requests a drained server has carry on, and it gets no
// new ones. A drained server's health checks go on. It reports how many
// servers it found. A reload carries the state to the listener's new
// pool (Inherit), and an upgrade to the new process (cmd/splicer's
// passDrained); a restart does not (weight: 0 drains for good).
func (p *Pool) Drain(addr string, on bool) int {
	n := 0
	for _, s := range p.Servers() {
		if s.Addr == addr {
			s.drained.Store(on)
			n++
		}
	}
	if !on && n > 0 {
		p.queue.wake() // a server back in service may take a waiting client
	}
	return n
}

// Inherit takes over, for each of the pool's servers that old has at the
// same address, what an operator and the traffic taught old: whether it
// is drained, and its failures (a skip under way, the count). A reload
// that changes a listener builds its pools afresh; without this it would
// send clients again to a server drained for maintenance, or skipped as
// dead. Health is not carried: the new pool's checks begin at once.
func (p *Pool) Inherit(old *Pool) {
	if p.groups.inherit(p, &old.groups) {
		p.rebuild()
	}
	for _, s := range p.Servers() {
		for _, o := range old.Servers() {
			if o.Addr == s.Addr {
				s.drained.Store(o.drained.Load())
				s.fails.inherit(&o.fails)
				break
			}
		}
	}
}

// Failed records that s did not connect or did not answer, logging when
// that makes it skipped.
func (p *Pool) Failed(s *Server, log *slog.Logger) {
	if s.fails.Failed(p.Fail, time.Now()) {
		log.Warn("server skipped", "pool", p.Name, "server", s.Addr, "for", p.Fail.Timeout, "failures", p.Fail.MaxFails)
	}
}

// Succeeded records that s connected (tcp, filter) or answered a request
// (http-reverse): its earlier failures no longer count.
func (p *Pool) Succeeded(s *Server) { s.fails.Succeeded() }

// Health reports the pool's servers: whether each passed its last health
// check (always, without checks), is skipped now, and how many failures
// it had.
func (p *Pool) Health() []ServerHealth {
	now := time.Now()
	servers := p.Servers()
	out := make([]ServerHealth, len(servers))
	for i, s := range servers {
		out[i] = ServerHealth{Pool: p.Name, Server: s.Addr, ResolvedFrom: s.From, Healthy: s.Healthy(), Skipped: s.fails.Down(now),
			Failures: s.fails.Total(), Drained: s.Drained(), Backup: s.Backup, Active: s.active.Load()}
	}
	return out
}

// Pick returns the server for the next request or connection, or nil when
// every server is unhealthy, drained, full or in skip. key is what
// consistent_hash hashes (the client's IP address); skip holds servers
// that already failed for this request. Backup servers are picked only
// when no other server can be, and servers skipped for failures (Fail)
// only when no other usable one, backup or not, is left: a pool is never
// emptied by them.
func (p *Pool) Pick(key string, skip map[*Server]bool) *Server {
	var now time.Time
	connects := func(s *Server) bool {
		if !s.fails.MayBeDown() {
			return true
		}
		if now.IsZero() {
			now = time.Now()
		}
		return !s.fails.Down(now)
	}
	open := func(s *Server) bool { return s.takes() && !skip[s] }
	retry := len(skip) > 0
	set := p.set.Load()
	for _, usable := range [...]func(*Server) bool{func(s *Server) bool { return open(s) && connects(s) }, open} {
		for t := range set.tiers {
			if s := p.pick(set, key, &set.tiers[t], retry, usable); s != nil {
				return s
			}
		}
		retry = true
	}
	return nil
}

// pick is Pick's balancing among the servers of tier t usable says; retry
// is a second look for the same request.
func (p *Pool) pick(set *serverSet, key string, t *tier, retry bool, usable func(*Server) bool) *Server {
	switch p.Balance {
	case "least_conn":
		return set.leastConn(func(s *Server) bool { return s.Backup == t.backup && usable(s) })
	case "consistent_hash":
		return set.consistentHash(key, func(s *Server) bool { return s.Backup == t.backup && usable(s) })
	}
	return t.roundRobin(retry, usable)
}

// roundRobin takes the tier's next usable server in turn. A retry for the
// same request does not take a turn: it walks on from where the request's
// first look began, past the servers that failed. (Taking a turn would
// have every request meet a dead server of two first.)
func (t *tier) roundRobin(retry bool, usable func(*Server) bool) *Server {
	n := uint64(len(t.turns))
	if n == 0 {
		return nil
	}
	var start uint64
	if retry {
		start = t.next.Load() - 1
	} else {
		start = t.next.Add(1) - 1
	}
	for i := range n {
		if s := t.turns[(start+i)%n]; usable(s) {
			return s
		}
	}
	return nil
}

// smoothTurns is the order round_robin takes servers in: each as many
// times as its weight, spread as nginx's smooth weighted round robin
// spreads them (weights 5, 1, 1 give a a b a c a a, not a a a a a b c),
// computed once so that a pick is one atomic add.
func smoothTurns(servers []*Server) []*Server {
	total := 0
	for _, s := range servers {
		total += s.Weight
	}
	current := make([]int, len(servers))
	turns := make([]*Server, 0, total)
	for range total {
		best := -1
		for i, s := range servers {
			current[i] += s.Weight
			if s.Weight > 0 && (best < 0 || current[i] > current[best]) {
				best = i
			}
		}
		current[best] -= total
		turns = append(turns, servers[best])
	}
	return turns
}

// leastConn takes the usable server with the fewest held connections for
// its weight, the first in configuration order among equals; a server of
// weight 0 takes none.
func (set *serverSet) leastConn(usable func(*Server) bool) *Server {
	var best *Server
	for _, s := range set.servers {
		if s.Weight == 0 || !usable(s) {
			continue
		}
		// s.active/s.Weight < best.active/best.Weight, without division.
		if best == nil || s.active.Load()*int64(best.Weight) < best.active.Load()*int64(s.Weight) {
			best = s
		}
	}
	return best
}

// consistentHash walks the ring clockwise from key's hash to the first
// usable server, so a key keeps its server while that server is up.
func (set *serverSet) consistentHash(key string, usable func(*Server) bool) *Server {
	if len(set.ring) == 0 {
		return nil
	}
	h := hash64(key)
	i, _ := slices.BinarySearchFunc(set.ring, h, func(pt ringPoint, h uint64) int { return cmpUint64(pt.hash, h) })
	for j := range set.ring {
		if s := set.ring[(i+j)%len(set.ring)].srv; usable(s) {
			return s
		}
	}
	return nil
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	// fnv's low bits mix poorly for short, similar keys; a final avalanche
	// step (from splitmix64) spreads them over the ring.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

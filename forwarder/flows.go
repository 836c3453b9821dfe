// Flows: the registry of open pairs that /flows reports.

package forwarder

import (
	"sort"
	"sync"

	"github.com/splicer/splicer/engine"
)

// Flow is one pair as /flows shows it.
type Flow struct {
	ID        uint64  `json:"id"`
	Listener  string  `json:"listener"`
	Client    string  `json:"client"`
	Upstream  string  `json:"upstream"`
	Engine    string  `json:"engine"`
	Note      string  `json:"note,omitempty"`
	State     string  `json:"state"`
	BytesUp   int64   `json:"bytes_up"`
	BytesDown int64   `json:"bytes_down"`
	AgeS      float64 `json:"age_s"`
	// Adopted: an engine took the pair over from an earlier process
	// (ip with a pin directory); it has no ID, and AgeS counts from the
	// adoption.
	Adopted bool `json:"adopted,omitempty"`
	// Worker is the worker process that carries the pair, when a
	// master serves with workers (its /flows sets it).
	Worker *int `json:"worker,omitempty"`
}

// Flows is the set of open pairs, and the bytes of the closed ones. It
// is sharded by pair ID, so that pairs opening and closing at once on
// different CPUs seldom wait on the same lock.
type Flows struct {
	shards [flowShards]flowShard
	// adopted lists the pairs engines adopted from an earlier process,
	// which Snapshot shows after this forwarder's own.
	adopted func() []Flow
}

// flowShards is how many locks the open pairs are spread over.
const flowShards = 16

// flowShard holds the open pairs whose ID falls to it, and the bytes of
// its closed ones.
type flowShard struct {
	mu    sync.Mutex
	pairs map[uint64]*engine.Pair
	// closed is the bytes every closed pair moved, by listener and
	// direction: with the open pairs' running counts, the byte counter.
	closed map[string]*[2]int64
}

func newFlows() *Flows {
	f := &Flows{}
	for i := range f.shards {
		f.shards[i] = flowShard{pairs: make(map[uint64]*engine.Pair), closed: make(map[string]*[2]int64)}
	}
	return f
}

// shard is the shard of the pair with id.
func (f *Flows) shard(id uint64) *flowShard { return &f.shards[id%flowShards] }

func (f *Flows) add(p *engine.Pair) {
	s := f.shard(p.ID)
	s.mu.Lock()
	s.pairs[p.ID] = p
	s.mu.Unlock()
}

// remove takes p out of the open pairs and adds its bytes to the closed
// ones' in one step, so a scrape never counts them twice or not at all.
func (f *Flows) remove(p *engine.Pair) {
	s := f.shard(p.ID)
	s.mu.Lock()
	delete(s.pairs, p.ID)
	c := s.closed[p.Listener]
	if c == nil {
		c = new([2]int64)
		s.closed[p.Listener] = c
	}
	c[engine.Up] += p.Bytes(engine.Up)
	c[engine.Down] += p.Bytes(engine.Down)
	s.mu.Unlock()
}

// byteTotals is every pair's bytes so far, open and closed, by listener.
// Each shard is read in one step: a pair closing meanwhile is counted
// once, in its shard, as open or as closed.
func (f *Flows) byteTotals() map[string][2]int64 {
	out := make(map[string][2]int64)
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		for l, c := range s.closed {
			t := out[l]
			t[engine.Up] += c[engine.Up]
			t[engine.Down] += c[engine.Down]
			out[l] = t
		}
		for _, p := range s.pairs {
			t := out[p.Listener]
			t[engine.Up] += p.Bytes(engine.Up)
			t[engine.Down] += p.Bytes(engine.Down)
			out[p.Listener] = t
		}
		s.mu.Unlock()
	}
	return out
}

// Len returns the number of open pairs.
func (f *Flows) Len() int {
	n := 0
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		n += len(s.pairs)
		s.mu.Unlock()
	}
	return n
}

// Snapshot returns every open pair, oldest first, then the pairs engines
// adopted from an earlier process.
func (f *Flows) Snapshot() []Flow {
	var pairs []*engine.Pair
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		for _, p := range s.pairs {
			pairs = append(pairs, p)
		}
		s.mu.Unlock()
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].ID < pairs[j].ID })
	out := make([]Flow, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, flowOf(p))
	}
	if f.adopted != nil {
		out = append(out, f.adopted()...)
	}
	return out
}

func flowOf(p *engine.Pair) Flow {
	name, note := p.Engine()
	fl := Flow{ID: p.ID, Listener: p.Listener, Client: p.ClientAddr().String(),
		Engine: name, Note: note, State: p.State().String(),
		BytesUp: p.Bytes(engine.Up), BytesDown: p.Bytes(engine.Down), AgeS: uptime(p.Created)}
	// The address outlives the socket: engine ip forwards a pair whose
	// sockets it let go of (detached), and /flows still names its server.
	if up := p.UpstreamAddr(); up != nil {
		fl.Upstream = up.String()
	}
	if fl.Engine == "" {
		fl.Engine = "none"
	}
	return fl
}

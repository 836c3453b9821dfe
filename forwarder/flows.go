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

// Flows is the set of open pairs, and the bytes of the closed ones.
type Flows struct {
	mu    sync.Mutex
	pairs map[uint64]*engine.Pair
	// closed is the bytes every closed pair moved, by listener and
	// direction: with the open pairs' running counts, the byte counter.
	closed map[string]*[2]int64
	// adopted lists the pairs engines adopted from an earlier process,
	// which Snapshot shows after this forwarder's own.
	adopted func() []Flow
}

func newFlows() *Flows {
	return &Flows{pairs: make(map[uint64]*engine.Pair), closed: make(map[string]*[2]int64)}
}

func (f *Flows) add(p *engine.Pair) {
	f.mu.Lock()
	f.pairs[p.ID] = p
	f.mu.Unlock()
}

// remove takes p out of the open pairs and adds its bytes to the closed
// ones' in one step, so a scrape never counts them twice or not at all.
func (f *Flows) remove(p *engine.Pair) {
	f.mu.Lock()
	delete(f.pairs, p.ID)
	c := f.closed[p.Listener]
	if c == nil {
		c = new([2]int64)
		f.closed[p.Listener] = c
	}
	c[engine.Up] += p.Bytes(engine.Up)
	c[engine.Down] += p.Bytes(engine.Down)
	f.mu.Unlock()
}

// byteTotals is every pair's bytes so far, open and closed, by listener.
func (f *Flows) byteTotals() map[string][2]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][2]int64, len(f.closed))
	for l, c := range f.closed {
		out[l] = *c
	}
	for _, p := range f.pairs {
		t := out[p.Listener]
		t[engine.Up] += p.Bytes(engine.Up)
		t[engine.Down] += p.Bytes(engine.Down)
		out[p.Listener] = t
	}
	return out
}

// Len returns the number of open pairs.
func (f *Flows) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pairs)
}

// Snapshot returns every open pair, oldest first, then the pairs engines
// adopted from an earlier process.
func (f *Flows) Snapshot() []Flow {
	f.mu.Lock()
	pairs := make([]*engine.Pair, 0, len(f.pairs))
	for _, p := range f.pairs {
		pairs = append(pairs, p)
	}
	f.mu.Unlock()
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

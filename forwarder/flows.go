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
}

// Flows is the set of open pairs.
type Flows struct {
	mu    sync.Mutex
	pairs map[uint64]*engine.Pair
}

func newFlows() *Flows { return &Flows{pairs: make(map[uint64]*engine.Pair)} }

func (f *Flows) add(p *engine.Pair) {
	f.mu.Lock()
	f.pairs[p.ID] = p
	f.mu.Unlock()
}

func (f *Flows) remove(p *engine.Pair) {
	f.mu.Lock()
	delete(f.pairs, p.ID)
	f.mu.Unlock()
}

// Len returns the number of open pairs.
func (f *Flows) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pairs)
}

// Snapshot returns every open pair, oldest first.
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
	return out
}

func flowOf(p *engine.Pair) Flow {
	name, note := p.Engine()
	fl := Flow{ID: p.ID, Listener: p.Listener, Client: p.Client.RemoteAddr().String(),
		Engine: name, Note: note, State: p.State().String(),
		BytesUp: p.Bytes(engine.Up), BytesDown: p.Bytes(engine.Down), AgeS: uptime(p.Created)}
	if up := p.Upstream(); up != nil {
		fl.Upstream = up.RemoteAddr().String()
	}
	if fl.Engine == "" {
		fl.Engine = "none"
	}
	return fl
}

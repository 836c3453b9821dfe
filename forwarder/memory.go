// The collector's headroom while many pairs are detached (memory.detached_gc_percent): idle spliced pairs cost their heap once, not twice.

package forwarder

import (
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/splicer/splicer/internal/config"
)

// detachedGC lowers the collector's GOGC while at least a configured
// count of pairs are detached, and puts back the process's own once
// fewer than half that count are. A detached pair allocates nothing
// while it waits, so the lower headroom costs collections only in
// proportion to what the other pairs allocate: each collection marks
// the live heap (about a kilobyte per detached pair), and runs after
// that percent of it is allocated (a tenth by default) instead of all
// of it.
type detachedGC struct {
	pairs atomic.Int64
	// mu guards the settings, lowered and base.
	mu       sync.Mutex
	percent  int // the GOGC while many pairs are detached; 0: off
	at       int64
	lowered  bool
	base     int // the process's GOGC before lowering it
	setGCPct func(int) int
}

func newDetachedGC(m config.Memory) *detachedGC {
	g := &detachedGC{setGCPct: debug.SetGCPercent}
	g.configure(m)
	return g
}

// configure applies a (re)loaded configuration's settings.
func (g *detachedGC) configure(m config.Memory) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lowered { // lowered anew below, to the new percent
		g.setGCPct(g.base)
		g.lowered = false
	}
	g.percent, g.at = m.DetachedGCPercent, int64(m.DetachedPairs)
	g.adjust(g.pairs.Load())
}

// add counts d pairs more (or fewer) detached.
func (g *detachedGC) add(d int64) {
	n := g.pairs.Add(d)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.adjust(n)
}

// adjust, with mu held, lowers or restores GOGC for n detached pairs.
func (g *detachedGC) adjust(n int64) {
	switch want := g.percent > 0 && n >= g.at; {
	case want && !g.lowered:
		g.base = g.setGCPct(g.percent)
		g.lowered = true
		if g.base < g.percent {
			g.setGCPct(g.base) // off, or less headroom still: the process's stays
		}
	case g.lowered && (g.percent == 0 || n < g.at/2):
		g.setGCPct(g.base)
		g.lowered = false
	}
}

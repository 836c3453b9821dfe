// Counting unsplices and recording their latest durations, for Counters and the bench.

package ip

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// unspliceStats counts unsplices and records the latest durations, for
// Counters and the bench.
type unspliceStats struct {
	ok, failed atomic.Int64
	mu         sync.Mutex          // guards took and observe
	took       []time.Duration     // the latest maxTook
	observe    func(time.Duration) // ObserveUnsplice's
	// drops is a recent reading of the program's drop counters, for the
	// report of an unsplice that times out (recentDrops).
	drops atomic.Pointer[dropsReading]
}

const maxTook = 4096

func (s *unspliceStats) done(d time.Duration) {
	s.ok.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.took) == maxTook {
		s.took = s.took[1:]
	}
	s.took = append(s.took, d)
	if s.observe != nil {
		s.observe(d)
	}
}

// ObserveUnsplice implements engine.UnspliceObserver: fn gets the duration
// of every unsplice from now on (a metrics histogram).
func (e *Engine) ObserveUnsplice(fn func(time.Duration)) {
	e.counts.unsplices.mu.Lock()
	defer e.counts.unsplices.mu.Unlock()
	e.counts.unsplices.observe = fn
}

// UnspliceTimes returns how long the latest unsplices took (at most
// 4096), from the trigger (limit, watch or timer) to the pair back in
// control mode: waiting for the receivers' ACKs, rebuilding both sockets,
// removing the pair.
func (e *Engine) UnspliceTimes() []time.Duration {
	e.counts.unsplices.mu.Lock()
	defer e.counts.unsplices.mu.Unlock()
	return slices.Clone(e.counts.unsplices.took)
}

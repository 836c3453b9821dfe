// Counting unsplices and keeping their latest durations, for Counters and the bench.

package ip

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// unspliceStats counts unsplices and keeps the latest durations, for
// Counters and the bench.
type unspliceStats struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	took       []time.Duration // the latest maxTook
	observe    func(time.Duration)
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
	e.unspl.mu.Lock()
	defer e.unspl.mu.Unlock()
	e.unspl.observe = fn
}

// UnspliceTimes returns how long the latest unsplices took (at most
// 4096), from the trigger (limit, watch or timer) to the pair back in
// control mode: waiting for the receivers' ACKs, rebuilding both sockets,
// removing the pair.
func (e *Engine) UnspliceTimes() []time.Duration {
	e.unspl.mu.Lock()
	defer e.unspl.mu.Unlock()
	return slices.Clone(e.unspl.took)
}

// The queue of a pool whose servers are full (max_conns): a client waits up to queue_timeout for a place, as in HAProxy's server queue, instead of being refused at once.

package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// queue wakes the clients waiting for a place in a pool.
type queue struct {
	mu sync.Mutex
	// freed is closed, and forgotten, when a place frees: every waiter
	// then picks again. Nil while nobody waits.
	freed   chan struct{}
	waiting atomic.Int64
}

// wake has every waiting client pick again.
func (q *queue) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.freed != nil {
		close(q.freed)
		q.freed = nil
	}
}

// next is what a waiter waits on: a channel closed at the next wake.
func (q *queue) next() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.freed == nil {
		q.freed = make(chan struct{})
	}
	return q.freed
}

// Waiting is how many clients wait in the pool's queue now.
func (p *Pool) Waiting() int64 { return p.queue.waiting.Load() }

// WaitForPlace waits, until deadline (set to QueueTimeout from now on the
// first wait), for a full server of the pool to free a place, and reports
// whether the caller should pick again: false once the deadline or ctx
// has passed, or when nothing would free a place (no queue configured, or
// no usable server is full: every one failed its check or is drained).
func (p *Pool) WaitForPlace(ctx context.Context, deadline *time.Time) bool {
	if p.QueueTimeout <= 0 {
		return false
	}
	freed := p.queue.next() // before looking: a place freed meanwhile wakes it
	if !p.someFull() {
		return false
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(p.QueueTimeout)
	}
	wait := time.Until(*deadline)
	if wait <= 0 {
		return false
	}
	p.queue.waiting.Add(1)
	defer p.queue.waiting.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-freed:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// someFull reports whether a server that could otherwise be picked is
// full: only then may waiting give a client a place.
func (p *Pool) someFull() bool {
	for _, s := range p.Servers {
		if s.healthy.Load() && !s.drained.Load() && s.full() {
			return true
		}
	}
	return false
}

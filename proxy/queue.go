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
// first wait), for a full server of the pool not in skip to free a place,
// and reports whether the caller should pick again (Pick with skip):
// false once the deadline or ctx has passed, or when nothing would free a
// place (no queue configured, or no server it could pick is full: each
// failed its check, is drained or is in skip).
func (p *Pool) WaitForPlace(ctx context.Context, deadline *time.Time, skip map[*Server]bool) bool {
	if p.QueueTimeout <= 0 {
		return false
	}
	freed := p.queue.next() // before looking: a place freed from now on wakes it
	switch p.places(skip) {
	case placeFree:
		return true // freed since the caller's Pick looked
	case noneToWaitFor:
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

// placeState is what waiting may give a client.
type placeState int

const (
	placeFree     placeState = iota // a server Pick would take has room
	allFull                         // none has, and a full one may free a place
	noneToWaitFor                   // none has, and none is full
)

// places says whether a server Pick could take (outside skip, weighted,
// healthy and not drained) has room, or is full.
func (p *Pool) places(skip map[*Server]bool) placeState {
	state := noneToWaitFor
	for _, s := range p.Servers {
		if s.Weight == 0 || skip[s] || !s.healthy.Load() || s.drained.Load() {
			continue // Pick would not take it
		}
		if !s.full() {
			return placeFree
		}
		state = allFull
	}
	return state
}

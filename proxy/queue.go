// The queue of a pool whose servers are full (max_conns): a client waits up to queue_timeout for a place, as in HAProxy's server queue, instead of being refused at once.

package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
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

// join counts one more waiter, unless max (0: no bound) wait already.
func (q *queue) join(max int64) bool {
	for {
		n := q.waiting.Load()
		if max > 0 && n >= max {
			return false
		}
		if q.waiting.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Waiting is how many clients wait in the pool's queue now.
func (p *Pool) Waiting() int64 { return p.queue.waiting.Load() }

// ErrClientLeft: the client went away while it waited in a queue for a
// place (close reason client_left), and nothing was dialled for it.
var ErrClientLeft = errors.New("the client left while it waited in the queue for a place")

// Leaving is what tells that a waiting client has gone.
type Leaving int

const (
	// AtReset: only a reset. A TCP client that half-closes may still wait
	// for the server's answer (nc -N, a protocol whose request ends with a
	// FIN), as it would over a direct connection.
	AtReset Leaving = iota
	// AtClose: a reset, or a FIN: an HTTP client that closes has given up
	// its request (nginx logs it as 499 and closes the upstream).
	AtClose
)

// Waiter is the client that waits for a place, watched while it waits so
// that one that leaves does not hold a place in the queue (HAProxy's
// abortonclose): a client that gives up at its own timeout would
// otherwise be dialled a server once a place freed, ahead of those still
// waiting, and an attacker could fill the queue with connections it
// closes at once. A nil Conn is not watched.
type Waiter struct {
	Conn    *net.TCPConn
	Leaving Leaving
}

// WaitForPlace waits, until deadline (set to QueueTimeout from now on the
// first wait), for a full server of the pool not in skip to free a place,
// and reports whether the caller should pick again (Pick with skip):
// false once the deadline or ctx has passed, or when nothing would free a
// place (no queue configured, or no server it could pick is full: each
// failed its check, is drained or is in skip), and at once when MaxQueue
// clients wait already. It returns ErrClientLeft when w's client leaves
// first.
func (p *Pool) WaitForPlace(ctx context.Context, deadline *time.Time, skip map[*Server]bool, w Waiter) (bool, error) {
	if p.QueueTimeout <= 0 {
		return false, nil
	}
	freed := p.queue.next() // before looking: a place freed from now on wakes it
	switch p.places(skip) {
	case placeFree:
		return true, nil // freed since the caller's Pick looked
	case noneToWaitFor:
		return false, nil
	}
	if deadline.IsZero() {
		*deadline = time.Now().Add(p.QueueTimeout)
	}
	wait := time.Until(*deadline)
	if wait <= 0 {
		return false, nil
	}
	if !p.queue.join(p.MaxQueue) {
		return false, nil // the queue is full: refused as without one
	}
	defer p.queue.waiting.Add(-1)
	left, stop := w.watch()
	defer stop()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-freed:
		return true, nil
	case <-left:
		return false, ErrClientLeft
	case <-t.C:
	case <-ctx.Done():
	}
	return false, nil
}

// A waiting client's connection is looked at leftEvery at first, then
// half as often each time, down to once every leftEveryMost: a short wait
// notices a client that leaves within 50 ms, and a full queue of ten
// thousand long waits costs ten thousand getsockopt calls a second.
const (
	leftEvery     = 50 * time.Millisecond
	leftEveryMost = time.Second
)

// watch closes left once w's client has gone; stop ends the watch. It
// reads the connection's state (TCP_INFO) rather than wait on the poller
// for it to become readable: bytes the client sent ahead (a TLS hello, a
// pipelined request) keep it readable, and a peek cannot tell a FIN
// behind them, nor may it take them.
func (w Waiter) watch() (left <-chan struct{}, stop func()) {
	if w.Conn == nil {
		return nil, func() {}
	}
	gone, done := make(chan struct{}), make(chan struct{})
	go func() {
		every := leftEvery
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			if w.hasLeft() {
				close(gone)
				return
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
			every = min(2*every, leftEveryMost)
			t.Reset(every)
		}
	}()
	return gone, func() { close(done) }
}

// hasLeft reports whether w's client reset its connection, or with
// AtClose closed it. A connection the proxy closed itself says nothing:
// what closed it ends the wait.
func (w Waiter) hasLeft() bool {
	info, err := sockopt.TCPInfo(w.Conn)
	if err != nil {
		return false
	}
	switch info.State {
	case unix.BPF_TCP_CLOSE: // a reset: nothing can reach the client any more
		return true
	case unix.BPF_TCP_CLOSE_WAIT: // a FIN
		return w.Leaving == AtClose
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
	for _, s := range p.Servers() {
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

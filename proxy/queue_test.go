// A client waiting in a full pool's queue gets a place as soon as one frees, or gives up at queue_timeout; a pool without a queue, or with no full server, does not wait.

package proxy

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// fullPool is a pool of one server with max_conns 1, already held, whose
// queue waits up to timeout.
func fullPool(tb testing.TB, timeout time.Duration) (*Pool, *Server) {
	tb.Helper()
	p := NewPool(config.Pool{Name: "p", QueueTimeout: config.Duration(timeout),
		Servers: []config.PoolServer{{Address: "a:1", Weight: 1, MaxConns: 1}}})
	s := p.Servers()[0]
	if !s.Hold() {
		tb.Fatal("the empty server refused its first connection")
	}
	return p, s
}

// waits is WaitForPlace for a client nobody watches.
func waits(ctx context.Context, p *Pool, deadline *time.Time, skip map[*Server]bool) bool {
	again, _ := p.WaitForPlace(ctx, deadline, skip, Waiter{})
	return again
}

// waitInQueue has a client wait in p's queue, and returns once it does
// what WaitForPlace will say.
func waitInQueue(p *Pool) <-chan bool {
	woke := make(chan bool, 1)
	go func() {
		var deadline time.Time
		woke <- waits(context.Background(), p, &deadline, nil)
	}()
	for p.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	return woke
}

func TestQueueWakesAWaiterWhenAPlaceFrees(t *testing.T) {
	p, s := fullPool(t, 10*time.Second)
	woke := waitInQueue(p)
	start := time.Now()
	s.Release()
	if !<-woke {
		t.Fatal("the waiter gave up when a place freed")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the waiter woke %v after the place freed", d)
	}
	if p.Waiting() != 0 {
		t.Errorf("Waiting() = %d after the waiter left, want 0", p.Waiting())
	}
	if got := p.Pick("", nil); got != s {
		t.Errorf("Pick after the release: %v, want the freed server", got)
	}
}

func TestQueueGivesUpAtItsTimeout(t *testing.T) {
	p, _ := fullPool(t, 100*time.Millisecond)
	var deadline time.Time
	start := time.Now()
	if waits(context.Background(), p, &deadline, nil) {
		t.Fatal("the waiter was woken with no place freed")
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("gave up after %v, before queue_timeout 100ms", d)
	}
	// A second wait for the same client does not start the clock again.
	if waits(context.Background(), p, &deadline, nil) {
		t.Error("a second wait past the deadline waited")
	}
}

func TestQueueEndsWithTheClient(t *testing.T) {
	p, _ := fullPool(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var deadline time.Time
	if waits(ctx, p, &deadline, nil) {
		t.Error("a waiter whose client went away was told to pick again")
	}
}

func TestNoQueueWithoutTimeoutOrFullServer(t *testing.T) {
	p, _ := fullPool(t, 0)
	var deadline time.Time
	if waits(context.Background(), p, &deadline, nil) || !deadline.IsZero() {
		t.Error("a pool without queue_timeout waited")
	}
	// Not full, but drained: no release would make room.
	q := NewPool(config.Pool{Name: "q", QueueTimeout: config.Duration(time.Minute),
		Servers: []config.PoolServer{{Address: "a:1", Weight: 1, MaxConns: 1}}})
	q.Drain("a:1", true)
	done := make(chan bool, 1)
	go func() { done <- waits(context.Background(), q, &deadline, nil) }()
	select {
	case waited := <-done:
		if waited {
			t.Error("a pool with no full server was told to pick again")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a pool whose only server is drained, not full, queued the client")
	}
}

func TestQueueWakesWhenAServerIsReadied(t *testing.T) {
	p := NewPool(config.Pool{Name: "p", QueueTimeout: config.Duration(10 * time.Second),
		Servers: []config.PoolServer{{Address: "a:1", Weight: 1, MaxConns: 1}, {Address: "b:1", Weight: 1}}})
	p.Drain("b:1", true)
	p.Servers()[0].Hold()
	woke := waitInQueue(p)
	p.Drain("b:1", false)
	if !<-woke {
		t.Fatal("the waiter was not woken when a drained server came back")
	}
}

// A place freed after the caller's Pick and before its wait is not lost:
// the client picks again at once.
func TestQueueSeesAPlaceFreedBeforeItWaits(t *testing.T) {
	p, s := fullPool(t, time.Minute)
	s.Release()
	done := make(chan bool, 1)
	go func() {
		var deadline time.Time
		done <- waits(context.Background(), p, &deadline, nil)
	}()
	select {
	case again := <-done:
		if !again {
			t.Error("a client with a place free was refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client waited for a place that was already free")
	}
}

// Servers Pick would not take neither count as room (no client is told
// to pick again for them) nor as full (none waits for them).
func TestQueueIgnoresServersPickSkips(t *testing.T) {
	p := NewPool(config.Pool{Name: "p", QueueTimeout: config.Duration(time.Minute),
		Servers: []config.PoolServer{{Address: "a:1", Weight: 1, MaxConns: 1}, {Address: "b:1", Weight: 0}, {Address: "c:1", Weight: 1}}})
	a, c := p.Servers()[0], p.Servers()[2]
	a.Hold()
	var deadline time.Time
	// c has room but failed this request already; b has room but weight 0.
	done := make(chan bool, 1)
	go func() { done <- waits(context.Background(), p, &deadline, map[*Server]bool{c: true}) }()
	for p.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	a.Release()
	if !<-done {
		t.Error("the waiter was not woken by a's place")
	}
	// Only a skipped server is full: nothing to wait for.
	a.Hold()
	if waits(context.Background(), p, &deadline, map[*Server]bool{a: true, c: true}) {
		t.Error("told to pick again with every server it could take skipped")
	}
}

// A waiting client that leaves ends its wait with ErrClientLeft: a reset
// always, a FIN only where it gives the request up (AtClose). A TCP
// client that half-closes, having sent bytes ahead, still waits.
func TestQueueNoticesAClientThatLeaves(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaving Leaving
		leave   func(*net.TCPConn)
		leaves  bool
	}{
		{"reset", AtReset, func(c *net.TCPConn) { c.SetLinger(0); c.Close() }, true},
		{"close, http", AtClose, func(c *net.TCPConn) { c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); c.Close() }, true},
		{"half-close, tcp", AtReset, func(c *net.TCPConn) { c.Write([]byte("hello")); c.CloseWrite() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, s := fullPool(t, time.Minute)
			proxySide, client := testenv.TCPPair(t)
			type result struct {
				again bool
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var deadline time.Time
				again, err := p.WaitForPlace(context.Background(), &deadline, nil, Waiter{Conn: proxySide, Leaving: tc.leaving})
				done <- result{again, err}
			}()
			for p.Waiting() != 1 {
				time.Sleep(time.Millisecond)
			}
			tc.leave(client)
			select {
			case r := <-done:
				if !tc.leaves {
					t.Fatalf("WaitForPlace = %v, %v before a place freed; want the client still waiting", r.again, r.err)
				}
				if r.again || !errors.Is(r.err, ErrClientLeft) {
					t.Fatalf("WaitForPlace = %v, %v; want false, ErrClientLeft", r.again, r.err)
				}
				return
			case <-time.After(10 * leftEvery):
				if tc.leaves {
					t.Fatalf("the client left and still waited %v", 10*leftEvery)
				}
			}
			s.Release()
			if r := <-done; !r.again || r.err != nil {
				t.Errorf("a client that stayed, once a place freed: %v, %v; want to pick again", r.again, r.err)
			}
		})
	}
}

// With max_queue, a client past the bound is refused at once, and the
// bound frees as a waiter leaves.
func TestQueueHoldsAtMostMaxQueue(t *testing.T) {
	p, s := fullPool(t, time.Minute)
	p.MaxQueue = 1
	woke := waitInQueue(p)
	var deadline time.Time
	start := time.Now()
	if waits(context.Background(), p, &deadline, nil) {
		t.Fatal("a second client was queued past max_queue 1")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the client past max_queue was refused after %v, want at once", d)
	}
	s.Release()
	if !<-woke {
		t.Fatal("the queued client was not woken when a place freed")
	}
	s.Hold()
	woke = waitInQueue(p) // its place in the queue is free again
	s.Release()
	if !<-woke {
		t.Error("a client queued after the first left was not woken")
	}
}

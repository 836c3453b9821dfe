// A listener's lifecycle: its own stop signal, cancel context and pair count, so a reload can retire one listener while the others run on.

package forwarder

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lifecycle is what a listener needs to be retired on its own: a reload
// that removes or replaces it stops its accepting, tells its pairs to
// finish (Stopping) and waits for them (a removed listener's up to the
// grace period, then it cancels the rest), without touching the other
// listeners' pairs.
type lifecycle struct {
	hard   context.Context // the context every pair of the listener runs in
	cancel context.CancelFunc
	// stopping is closed when the listener stops accepting for good (a
	// shutdown, or a reload that retires it): idle keep-alive pairs end.
	stopping chan struct{}
	stopOnce sync.Once
	// handover is set when the listening socket passes to a successor: the
	// accept loop then returns without closing it.
	handover atomic.Bool
	// served is closed when the accept loop has returned; started says
	// whether one ever ran.
	served  chan struct{}
	started atomic.Bool
	pairs   sync.WaitGroup
	release sync.Once
}

func newLifecycle(parent context.Context) lifecycle {
	hard, cancel := context.WithCancel(parent)
	return lifecycle{hard: hard, cancel: cancel, stopping: make(chan struct{}), served: make(chan struct{})}
}

// stop tells the listener's pairs that no more requests are wanted.
func (lc *lifecycle) stop() { lc.stopOnce.Do(func() { close(lc.stopping) }) }

func (lc *lifecycle) handingOver() bool { return lc.handover.Load() }

// waitServed waits until the accept loop has returned, if one was started.
func (lc *lifecycle) waitServed() {
	if lc.started.Load() {
		<-lc.served
	}
}

// finish waits for the listener's pairs to end on their own. hard derives
// from the forwarder's, so a shutdown still cancels them at its deadline.
func (lc *lifecycle) finish() {
	lc.pairs.Wait()
	lc.cancel()
}

// drain waits for the listener's pairs, cancelling them after grace.
func (lc *lifecycle) drain(grace time.Duration) (cut bool) {
	done := make(chan struct{})
	go func() { lc.pairs.Wait(); close(done) }()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		cut = true
		lc.cancel()
		<-done
	}
	lc.cancel()
	return cut
}

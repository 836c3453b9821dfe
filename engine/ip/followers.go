// The pairs the engine follows to their end, by A tuple, and the goroutines that bring them news until Close.

package ip

import (
	"sync"
	"sync/atomic"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// followers are the spliced pairs the engine follows: those a Splice
// follows itself (follow, by a channel of news) and those the engine
// follows for their callers (detached.go); and the goroutines that bring
// them news (the datapath's events, the sweeper, the detached pairs'
// ticker, the adopted pairs' followers in persist.go), which run until
// Close closes stop.
type followers struct {
	// mu guards waiters and detached. A pair moves from one to the
	// other under it (handOver), so notify finds it in one of them.
	mu sync.Mutex
	// waiters are the channels of the Splices following their pairs.
	waiters map[datapath.Tuple]chan notice
	// detached are the pairs followed without their callers;
	// tickOnce starts their ticker (tickDetached).
	detached map[datapath.Tuple]*detached
	tickOnce sync.Once
	// leave: LeavePairs was called (the old process of an upgrade):
	// pairs still spliced when cancelled, or at Close, are left
	// forwarding in the pinned datapath for the next process.
	leave atomic.Bool
	// stop is closed by Close, which then waits for wg: every goroutine
	// the engine starts is counted in wg and ends at stop.
	stop chan struct{}
	wg   sync.WaitGroup
}

func newFollowers() *followers {
	return &followers{
		waiters:  make(map[datapath.Tuple]chan notice),
		detached: make(map[datapath.Tuple]*detached),
		stop:     make(chan struct{}),
	}
}

// start runs fn on a goroutine of its own, which Close waits for.
func (fs *followers) start(fn func()) {
	fs.wg.Add(1)
	go func() { defer fs.wg.Done(); fn() }()
}

// register returns the channel of news for the pair a, which the
// calling Splice follows.
func (fs *followers) register(a datapath.Tuple) chan notice {
	ch := make(chan notice, 8)
	fs.mu.Lock()
	fs.waiters[a] = ch
	fs.mu.Unlock()
	return ch
}

func (fs *followers) unregister(a datapath.Tuple) {
	fs.mu.Lock()
	delete(fs.waiters, a)
	fs.mu.Unlock()
}

// lookup returns who follows pair a: a Splice's channel, or the
// detached pair; neither when no one does.
func (fs *followers) lookup(a datapath.Tuple) (chan notice, *detached) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.waiters[a], fs.detached[a]
}

// handOver moves pair a from its Splice's following to the engine's, d.
func (fs *followers) handOver(a datapath.Tuple, d *detached) {
	fs.mu.Lock()
	delete(fs.waiters, a)
	fs.detached[a] = d
	fs.mu.Unlock()
}

// drop stops following the detached pair d, unless another took its
// place meanwhile.
func (fs *followers) drop(d *detached) {
	fs.mu.Lock()
	if fs.detached[d.f.a] == d {
		delete(fs.detached, d.f.a)
	}
	fs.mu.Unlock()
}

// detachedPairs appends the detached pairs to ds.
func (fs *followers) detachedPairs(ds []*detached) []*detached {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, d := range fs.detached {
		ds = append(ds, d)
	}
	return ds
}

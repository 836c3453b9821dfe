// The pairs the engine follows to their end, by A tuple, and the goroutines that bring them news until Close.

package ip

import (
	"hash/maphash"
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
	// detached are the pairs followed without their callers, by a hash
	// of their A tuple (hashTuple): a 64-byte tuple as the key of every
	// pair would cost more than the rest of its entry. Pairs whose
	// hashes collide are chained through detached.next. tickOnce starts
	// their ticker (tickDetached).
	detached map[uint64]*detached
	seed     maphash.Seed
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
		detached: make(map[uint64]*detached),
		seed:     maphash.MakeSeed(),
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
	for d := fs.detached[fs.hashTuple(a)]; d != nil; d = d.next {
		if d.f.a == a {
			return fs.waiters[a], d
		}
	}
	return fs.waiters[a], nil
}

// handOver moves pair a from its Splice's following to the engine's, d,
// in place of any detached pair of the same tuple.
func (fs *followers) handOver(a datapath.Tuple, d *detached) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.waiters, a)
	h := fs.hashTuple(a)
	fs.unchain(h, func(o *detached) bool { return o.f.a == a })
	d.next = fs.detached[h]
	fs.detached[h] = d
}

// drop stops following the detached pair d, unless another took its
// place meanwhile.
func (fs *followers) drop(d *detached) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.unchain(fs.hashTuple(d.f.a), func(o *detached) bool { return o == d })
}

// unchain takes the first pair of hash h's chain for which is holds
// out of the chain, with fs.mu held.
func (fs *followers) unchain(h uint64, is func(*detached) bool) {
	var prev *detached
	for d := fs.detached[h]; d != nil; prev, d = d, d.next {
		if !is(d) {
			continue
		}
		switch {
		case prev != nil:
			prev.next = d.next
		case d.next != nil:
			fs.detached[h] = d.next
		default:
			delete(fs.detached, h)
		}
		d.next = nil
		return
	}
}

func (fs *followers) hashTuple(a datapath.Tuple) uint64 { return maphash.Comparable(fs.seed, a) }

// detachedPairs appends the detached pairs to ds.
func (fs *followers) detachedPairs(ds []*detached) []*detached {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, d := range fs.detached {
		for ; d != nil; d = d.next {
			ds = append(ds, d)
		}
	}
	return ds
}

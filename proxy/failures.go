// Passive failure detection of upstream servers (nginx's max_fails and fail_timeout): a server that keeps failing is skipped for a while.

package proxy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// Failures is one upstream server's recent failures (connects that
// failed; for http-reverse, requests it did not answer) under a
// config.FailPolicy. Down is read for every pick, so it takes no lock.
type Failures struct {
	mu    sync.Mutex
	fails atomic.Int32 // failures since first
	first time.Time    // the first of them
	// until is when the server is picked again, in Unix nanoseconds; 0:
	// it never was skipped.
	until atomic.Int64
	// total counts every failure, whatever the policy.
	total atomic.Uint64
}

// Total is how many failures were recorded since the server was set up.
func (f *Failures) Total() uint64 { return f.total.Load() }

// Down reports whether the server is skipped at now.
func (f *Failures) Down(now time.Time) bool {
	u := f.until.Load()
	return u != 0 && now.UnixNano() < u
}

// MayBeDown reports whether the server was skipped since it last
// connected: if not, it is not Down, which a pick learns without asking
// the time.
func (f *Failures) MayBeDown() bool { return f.until.Load() != 0 }

// Failed records a failure at now and reports whether it made the server
// skipped: MaxFails of them within Timeout skip it for Timeout.
func (f *Failures) Failed(p config.FailPolicy, now time.Time) bool {
	f.total.Add(1)
	if p.MaxFails <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails.Load() == 0 || now.Sub(f.first) >= p.Timeout {
		f.fails.Store(0)
		f.first = now
	}
	if f.fails.Add(1) < int32(p.MaxFails) {
		return false
	}
	f.fails.Store(0)
	f.until.Store(now.Add(p.Timeout).UnixNano())
	return true
}

// inherit copies old's state into f, which no one uses yet.
func (f *Failures) inherit(old *Failures) {
	old.mu.Lock()
	defer old.mu.Unlock()
	f.fails.Store(old.fails.Load())
	f.first = old.first
	f.until.Store(old.until.Load())
	f.total.Store(old.total.Load())
}

// Succeeded records a connect that worked (an answered request, for
// http-reverse): earlier failures no longer count, and a server skipped
// no longer is.
func (f *Failures) Succeeded() {
	if f.fails.Load() == 0 && f.until.Load() == 0 {
		return
	}
	f.mu.Lock()
	f.fails.Store(0)
	f.until.Store(0)
	f.mu.Unlock()
}

// Passive failure detection of upstream servers (nginx's max_fails and fail_timeout): a server that keeps failing is skipped for a while, and a listener's upstream list taken round robin around the skipped ones.

package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
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

// Upstreams is a listener's list of upstream servers (tcp, filter), taken
// round robin, with the servers whose connects failed skipped as its
// policy says, and those that fail their health checks, if any, not used.
type Upstreams struct {
	addrs   []string
	fails   []Failures
	healthy []atomic.Bool
	policy  config.FailPolicy
	next    atomic.Uint64
	// stop ends the health checks; checks waits for them.
	stop   context.CancelFunc
	checks sync.WaitGroup
}

// NewUpstreams returns the list addrs under policy, every server healthy.
func NewUpstreams(addrs []string, policy config.FailPolicy) *Upstreams {
	u := &Upstreams{addrs: addrs, fails: make([]Failures, len(addrs)), healthy: make([]atomic.Bool, len(addrs)), policy: policy}
	for i := range u.healthy {
		u.healthy[i].Store(true)
	}
	return u
}

// Check starts checking every server as hc says, dialling with dial, until
// Close.
func (u *Upstreams) Check(hc config.HealthCheck, dial CheckDialer, log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	u.stop = cancel
	for i, a := range u.addrs {
		u.checks.Add(1)
		go func() {
			defer u.checks.Done()
			CheckHealth(ctx, hc, a, &u.healthy[i], dial, log, "list", "upstream")
		}()
	}
}

// Close ends the health checks, if any, and waits for them.
func (u *Upstreams) Close() error {
	if u.stop != nil {
		u.stop()
	}
	u.checks.Wait()
	return nil
}

// ErrNoHealthyUpstream: every server of the list failed its last health
// check (close reason upstream_unreachable).
var ErrNoHealthyUpstream = errors.Join(ErrUpstreamUnreachable, errors.New("no upstream passed its last health check"))

// UpstreamsError is every failed connect of one Upstreams.Dial, in the
// order they were tried.
type UpstreamsError struct{ Errs []error }

func (e *UpstreamsError) Error() string { return errors.Join(e.Errs...).Error() }

func (e *UpstreamsError) Unwrap() []error { return e.Errs }

// Last is the error of the last connect tried.
func (e *UpstreamsError) Last() error { return e.Errs[len(e.Errs)-1] }

// Dial connects s to the next healthy upstream in round-robin order that
// is not skipped, trying the others in turn when it does not connect, and
// the skipped ones last: a list whose every healthy server is skipped is
// still tried whole. Servers that failed their health check are not
// tried (ErrNoHealthyUpstream when none passed). It returns the
// connection, or an *UpstreamsError.
func (u *Upstreams) Dial(ctx context.Context, s Session) (*net.TCPConn, error) {
	if len(u.addrs) == 0 {
		return nil, errors.New("no upstream")
	}
	start := u.next.Add(1) - 1
	now := time.Now()
	order := make([]int, 0, len(u.addrs))
	for _, down := range []bool{false, true} {
		for i := range u.addrs {
			j := int((start + uint64(i)) % uint64(len(u.addrs)))
			if u.healthy[j].Load() && u.fails[j].Down(now) == down {
				order = append(order, j)
			}
		}
	}
	if len(order) == 0 {
		return nil, ErrNoHealthyUpstream
	}
	var errs []error
	for _, j := range order {
		up, err := s.Dial(ctx, u.addrs[j])
		if err == nil {
			u.fails[j].Succeeded()
			return up, nil
		}
		errs = append(errs, err)
		s.Log().Warn("upstream connect failed", "upstream", u.addrs[j], "err", err)
		if ctx.Err() == nil && u.fails[j].Failed(u.policy, time.Now()) {
			s.Log().Warn("upstream skipped", "upstream", u.addrs[j], "for", u.policy.Timeout, "failures", u.policy.MaxFails)
		}
	}
	return nil, &UpstreamsError{Errs: errs}
}

// Health reports the list's servers under the pool name "upstream":
// whether each passed its last health check (always, without checks), is
// skipped now, and how many failures it had.
func (u *Upstreams) Health() []ServerHealth {
	now := time.Now()
	out := make([]ServerHealth, len(u.addrs))
	for i, a := range u.addrs {
		out[i] = ServerHealth{Pool: "upstream", Server: a, Healthy: u.healthy[i].Load(), Skipped: u.fails[i].Down(now), Failures: u.fails[i].Total()}
	}
	return out
}

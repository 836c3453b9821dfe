// Keys of upstream lists and pools about their servers' failures and fullness: passive failure detection (max_fails, fail_timeout), when a server that does not connect is skipped, and the queue (queue_timeout, max_queue) of a pool whose servers are full.

package config

import "time"

// Defaults of max_fails and fail_timeout, nginx's.
const (
	DefaultMaxFails    = 1
	DefaultFailTimeout = 10 * time.Second
)

// FailPolicy says when a server that does not connect is skipped: after
// MaxFails failed connects within Timeout, for Timeout. MaxFails 0
// never skips.
type FailPolicy struct {
	MaxFails int
	Timeout  time.Duration
}

// FailPolicy is the policy of the pool's servers (an http-reverse pool, or
// a listener's upstream list as Listener.UpstreamList makes it a pool):
// max_fails (nil: left out) and fail_timeout (0: left out) with their
// defaults filled in.
func (pl *Pool) FailPolicy() FailPolicy {
	p := FailPolicy{MaxFails: DefaultMaxFails, Timeout: DefaultFailTimeout}
	if pl.MaxFails != nil {
		p.MaxFails = *pl.MaxFails
	}
	if pl.FailTimeout > 0 {
		p.Timeout = pl.FailTimeout.Std()
	}
	return p
}

// maxMaxFails bounds max_fails: more would never skip a server in practice.
const maxMaxFails = 1000

// failKeys checks a max_fails and fail_timeout pair at p.
func (v *validator) failKeys(p string, maxFails *int, timeout Duration) {
	if maxFails != nil && (*maxFails < 0 || *maxFails > maxMaxFails) {
		v.errorf(p+".max_fails", "expected 0 (never skip a server) to %d, got %d", maxMaxFails, *maxFails)
	}
	v.positiveOrLeftOut(p+".fail_timeout", int64(timeout), timeout.String(), DefaultFailTimeout)
}

// queue checks the queue_timeout and max_queue at p: the queue waits for
// a place that only a server's max_conns can make scarce, and max_queue
// bounds a queue that is there.
func (v *validator) queue(p string, timeout Duration, maxQueue int, servers []PoolServer) {
	switch {
	case maxQueue < 0:
		v.errorf(p+".max_queue", "expected a count of waiting clients (0: no bound), got %d", maxQueue)
	case maxQueue > 0 && timeout <= 0:
		v.errorf(p+".max_queue", "bounds the queue of queue_timeout, which is not set: no client ever waits")
	}
	p += ".queue_timeout"
	v.positiveOrLeftOut(p, int64(timeout), timeout.String(), "none: refused at once")
	if timeout <= 0 {
		return
	}
	for _, s := range servers {
		if s.MaxConns > 0 {
			return
		}
	}
	v.errorf(p, "waits for a full server to free a place, but no server here has max_conns: nothing is ever full")
}

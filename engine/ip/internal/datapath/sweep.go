// The sweeper: removes pairs whose TIME_WAIT ran out, that a reset closed, or that stayed idle too long.

package datapath

import (
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

// Now returns the clock the program stamps packets with (CLOCK_MONOTONIC,
// as time since boot); pass it to Sweep. It reads the clock through the
// runtime's monotonic time, which is CLOCK_MONOTONIC read in the vDSO:
// no system call (x/sys's ClockGettime makes one, a microsecond on a
// virtual machine, several times per splice).
func Now() time.Duration {
	return monoBase.ns + time.Since(monoBase.at)
}

// monoBase pairs a Go time with CLOCK_MONOTONIC read right around it.
// Go's monotonic readings are CLOCK_MONOTONIC, so the two move together;
// the pair is off by at most half the time between the two system calls
// that bracket time.Now (err), a fraction of a microsecond unless the
// thread was preempted between them: of several tries, the narrowest
// bracket is kept.
var monoBase = func() (b struct {
	at      time.Time
	ns, err time.Duration
}) {
	b.err = time.Hour
	for range 8 {
		before := clockMonotonic()
		at := time.Now()
		after := clockMonotonic()
		if half := (after - before) / 2; half < b.err {
			b.at, b.ns, b.err = at, before+half, half
		}
	}
	return b
}()

func clockMonotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("CLOCK_MONOTONIC: " + err.Error()) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// Removal says which pair Sweep removed and why.
type Removal struct {
	Pair   Tuple
	Reason string // "reset", "time_wait" or "idle"
}

// Sweep removes the pairs that are over at time now (see Now): closed by
// a reset, in TIME_WAIT for Options.TimeWait, or, with an
// Options.IdleTimeout, idle that long in both directions. A pair's age is
// taken from its most recent packet either way; a held pair ages too.
func (d *Datapath) Sweep(now time.Duration) ([]Removal, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	var out []Removal
	var errs []error
	for _, p := range d.index.all() {
		reason := d.expired(p, now)
		if reason == "" {
			continue
		}
		if err := d.remove(p); err != nil {
			errs = append(errs, err)
		}
		out = append(out, Removal{Pair: p.a(), Reason: reason})
	}
	return out, errors.Join(errs...)
}

func (d *Datapath) expired(p *pair, now time.Duration) string {
	up, down := d.entry(p.slot(engine.Up)), d.entry(p.slot(engine.Down))
	flags := atomic.LoadUint32(&up.Flags) | atomic.LoadUint32(&down.Flags)
	idle := min(age(atomic.LoadUint32(&up.LastSeen), now), age(atomic.LoadUint32(&down.LastSeen), now))
	switch {
	case flags&flagClosed != 0:
		return "reset"
	case flags&flagTimeWait != 0 && idle >= d.opts.TimeWait:
		return "time_wait"
	case d.opts.IdleTimeout > 0 && idle >= d.opts.IdleTimeout:
		return "idle"
	}
	return ""
}

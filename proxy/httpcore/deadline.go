// The deadline of a connection in control mode: one standing deadline, moved only when less than its bound (keepalive_timeout, body_timeout, response_timeout, idle_timeout) is left.

package httpcore

import (
	"net"
	"sync/atomic"
	"time"
)

// idleDeadline keeps one standing deadline, for reads and writes, between
// idle and idle*17/16 ahead of every read or write of a connection in
// control mode: it moves only when less than idle is left. Setting a
// deadline and lifting it around each read and write cost ~1 µs a request
// (eight runtime timer updates); this is one update per idle/16, and a
// peer stalls the pair for at most idle/16 longer than its bound.
// Engines must not see it: Conn.Splice lifts it first.
type idleDeadline struct {
	conn *net.TCPConn
	// at is the deadline in place; zero when there is none, or when
	// other code set one (forget), so that refresh sets it anew.
	at time.Time
}

// refresh makes the deadline at least idle ahead (idle 0: no deadline,
// one refresh set for a bound before lifted). stopped set means the pair
// was interrupted: the deadline is put back in the past, in case the
// interrupt ran between the check and the set.
func (d *idleDeadline) refresh(idle time.Duration, stopped *atomic.Bool) {
	if idle <= 0 {
		if !d.at.IsZero() {
			d.lift()
			if stopped.Load() {
				d.conn.SetDeadline(past)
			}
		}
		return
	}
	now := time.Now()
	if d.at.Sub(now) >= idle {
		return
	}
	d.at = now.Add(idle + idle/16)
	d.conn.SetDeadline(d.at)
	if stopped.Load() {
		d.conn.SetDeadline(past)
	}
}

// refreshBefore is refresh for a connection that must also be done by
// limit (zero: no limit): the deadline is limit where that comes before
// the one refresh would set.
func (d *idleDeadline) refreshBefore(idle time.Duration, limit time.Time, stopped *atomic.Bool) {
	if limit.IsZero() || idle > 0 && limit.Sub(time.Now()) >= idle+idle/16 {
		d.refresh(idle, stopped)
		return
	}
	if !d.at.Equal(limit) {
		d.at = limit
		d.conn.SetDeadline(limit)
		if stopped.Load() {
			d.conn.SetDeadline(past)
		}
	}
}

// reset sets the deadline idle ahead (idle 0: none) whatever bound set
// the one in place, a longer one too; stopped as for refresh.
func (d *idleDeadline) reset(idle time.Duration, stopped *atomic.Bool) {
	d.lift()
	d.refresh(idle, stopped)
	if idle <= 0 && stopped.Load() {
		d.conn.SetDeadline(past)
	}
}

// lift removes the deadline refresh set, if any.
func (d *idleDeadline) lift() {
	if !d.at.IsZero() {
		d.conn.SetDeadline(time.Time{})
		d.at = time.Time{}
	}
}

// passed reports whether the deadline refresh set is over.
func (d *idleDeadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }

// forget says other code changed the deadline: the next refresh sets it.
func (d *idleDeadline) forget() { d.at = time.Time{} }

// streaming turns idle deadlines on for reads from both peers until the
// returned function runs.
func (c *Conn) streaming() (done func()) {
	c.clientIn.on = true
	if c.up != nil {
		c.up.in.on = true
	}
	return func() {
		c.clientIn.on = false
		if c.up != nil {
			c.up.in.on = false
		}
	}
}

// Reads and writes with deadlines: a read deadline before every read (fixed for a head, idle otherwise) and a write deadline before every write, counted in the pair.

package filter

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"
)

// countingWriter adds what it writes to one direction of the pair.
type countingWriter struct {
	w    *net.TCPConn
	pair *engine.Pair
	dir  engine.Direction
	idle time.Duration
}

// Write forwards b; a peer that takes nothing for idle ends the pair.
func (w *countingWriter) Write(b []byte) (int, error) {
	if w.idle > 0 {
		w.w.SetWriteDeadline(time.Now().Add(w.idle))
	}
	n, err := w.w.Write(b)
	w.pair.AddBytes(w.dir, int64(n))
	return n, err
}

// deadlineReader sets a read deadline before every read: the fixed one if
// set (a head being read), else idle from now. stop makes reads fail, so a
// body copy can be cut short although it sets its own deadlines.
type deadlineReader struct {
	c     *net.TCPConn
	idle  atomic.Int64 // a time.Duration: set while a read may run (waitResponse)
	fixed time.Time
	stop  atomic.Bool
}

func (r *deadlineReader) setIdle(d time.Duration) { r.idle.Store(int64(d)) }

// interrupt ends the read in progress, and fails every later one: the
// filter's own doing, no timeout of the peer's.
func (r *deadlineReader) interrupt() {
	r.stop.Store(true)
	r.c.SetReadDeadline(time.Now())
}

// waitResponse bounds reads by idle from now, the one in progress too:
// the request body, sent in the background, is done.
func (r *deadlineReader) waitResponse(idle time.Duration) {
	r.setIdle(idle)
	if idle > 0 {
		r.c.SetReadDeadline(time.Now().Add(idle))
	}
}

var errStopped = errors.New("read stopped")

func (r *deadlineReader) Read(b []byte) (int, error) {
	d := r.fixed
	if idle := time.Duration(r.idle.Load()); d.IsZero() && idle > 0 {
		d = time.Now().Add(idle)
	}
	r.c.SetReadDeadline(d)
	// Checked after setting the deadline: a stop that comes later also
	// sets a deadline in the past, which ends this read.
	if r.stop.Load() {
		return 0, errStopped
	}
	return r.c.Read(b)
}

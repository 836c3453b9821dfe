// Run: the splice loop shared by engines that move bytes through the forwarder process (copy, pipe).

package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/sockopt"
)

// Pump moves bytes of one direction from src to dst: at most limit bytes when
// limit > 0, else until EOF. It calls moved after each chunk is fully written
// to dst. It returns nil at EOF or when the limit is reached; an interrupted
// read (deadline) returns os.ErrDeadlineExceeded after every byte already read
// was written, so stopping a pump never loses a byte. A write a deadline
// interrupted returns StalledWrite's error: the bytes it held are lost.
type Pump func(src, dst *net.TCPConn, limit int64, moved func(int64)) error

// ErrStalledWrite is a pump's write to a peer that took nothing for the
// splice's idle timeout after the splice ended: the pair ends as idle.
var ErrStalledWrite = errors.New("write stalled: the peer took nothing for the idle timeout")

// StalledWrite is the error a pump returns for its failed write err:
// wrapped in ErrStalledWrite when a deadline interrupted it.
func StalledWrite(err error) error {
	if isStop(err) {
		return fmt.Errorf("%w: %w", ErrStalledWrite, err)
	}
	return err
}

// event is something that happened to one direction during a splice.
type event struct {
	kind eventKind
	dir  Direction
	err  error
}

type eventKind uint8

const (
	evEOF eventKind = iota
	evLimit
	evData
	evReset
	evStopped
	evStalled
	evError
	evIdle
	evCancel
	evTimer
	evPromote
)

// Run splices p with pump according to opts. The caller's goroutine
// carries one direction (a forwarded one if any) and one more goroutine
// the other, if it is forwarded or watched; the idle timeout, the timers
// and ctx are watched by callbacks (watchEnds), which take no goroutine
// until one fires. Whoever meets the event that ends the splice
// interrupts the others (runner.send). It is the whole of the copy and
// pipe engines but for the pump itself.
func Run(ctx context.Context, p *Pair, opts Options, pump Pump) (Result, error) {
	r := &runner{p: p, opts: opts, ended: make(chan struct{}), quit: make(chan struct{})}
	r.last.Store(time.Now().UnixNano())
	return r.run(ctx, pump)
}

type runner struct {
	p     *Pair
	opts  Options
	moved [2]atomic.Int64
	last  atomic.Int64 // unix nanos of the last byte moved

	// ended is closed once an event ended the splice; quit once every
	// task returned.
	ended, quit chan struct{}
	tasks       atomic.Int32 // tasks still running

	mu  sync.Mutex
	res Result
	// open counts the forwarded directions without their EOF yet.
	open int
	// done: an event ended the splice; later events go to late.
	done bool
	late []event
	// writing counts the forwarded directions whose pump has not
	// returned, which may be in a write; callerFree: the caller's own
	// task returned.
	writing    int
	callerFree bool
	// guarded: a goroutine keeps the write deadlines of a splice that
	// ended keeping the pair (guard); it closes guardDone when done.
	guarded   bool
	guardDone chan struct{}

	promoted atomic.Bool // evPromote was sent

	// timers end the splice after For, Promote.After and the idle
	// timeout, when set (watchEnds).
	timers [3]*time.Timer
	// cw is the watch of ctx's cancel r is on, between wprev and wnext.
	cw           *cancelWatch
	wprev, wnext *runner
}

// task is one direction's part of a splice: forwarding or watching.
type task struct {
	mode   Mode
	dir    Direction
	caller bool // run on the caller's goroutine
}

func (r *runner) run(ctx context.Context, pump Pump) (Result, error) {
	var tasks [2]task
	n := 0
	for _, d := range []Direction{Up, Down} {
		switch m := r.opts.Dir(d).Mode; m {
		case Forward, Watch:
			if m == Forward {
				r.open++
			}
			tasks[n] = task{mode: m, dir: d}
			n++
		}
	}
	if n == 0 {
		return Result{}, errors.New("splice with nothing to forward or watch")
	}
	if n == 2 && tasks[0].mode == Watch && tasks[1].mode == Forward {
		// The caller forwards: a watch's goroutine is the cheaper one.
		tasks[0], tasks[1] = tasks[1], tasks[0]
	}
	r.writing = r.open
	r.tasks.Store(int32(n))
	tasks[0].caller = true
	if n == 2 {
		go r.do(tasks[1], pump)
	}
	r.watchEnds(ctx)
	if r.opts.OnSpliced != nil {
		r.opts.OnSpliced()
	}
	r.do(tasks[0], pump)
	<-r.ended
	r.unwatch()
	return r.stop(), nil
}

// do runs t and reports how it ended.
func (r *runner) do(t task, pump Pump) {
	var ev event
	if t.mode == Forward {
		ev = r.forward(t.dir, pump)
	} else {
		ev = r.watch(t.dir)
	}
	r.send(ev, &t)
	if r.tasks.Add(-1) == 0 {
		close(r.quit)
	}
}

// send takes ev, which ended t if t is not nil. The event that ends the
// splice interrupts every task, from whichever goroutine meets it: reads
// by a deadline in the past; writes are let finish so no byte read is
// lost, unless the pair is ending anyway. Events after it are kept for
// stop to fold.
func (r *runner) send(ev event, t *task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t != nil {
		if t.mode == Forward {
			r.writing--
		}
		r.callerFree = r.callerFree || t.caller
	}
	if r.done {
		r.late = append(r.late, ev)
		return
	}
	if !r.take(ev) {
		return
	}
	r.done = true
	r.interrupt()
	close(r.ended)
}

// take folds ev into the result, reporting whether it ends the splice.
func (r *runner) take(ev event) bool {
	res := &r.res
	switch ev.kind {
	case evEOF:
		res.EOF[ev.dir] = true
		if r.open--; r.open > 0 {
			return false
		}
		res.End = EndEOF
	case evLimit:
		res.End, res.Dir = EndLimit, ev.dir
	case evData:
		res.End, res.Dir = EndData, ev.dir
	case evIdle:
		res.End = EndIdle
	case evCancel:
		res.End = EndCancel
	case evTimer:
		res.End = EndTimer
	case evPromote:
		res.End = EndPromote
	default:
		end, ok := ev.failure()
		if !ok {
			return false
		}
		res.End, res.Dir, res.Err = end, ev.dir, ev.err
	}
	return true
}

// interrupt stops every task once the splice ended (r.mu held). A
// write let finish waits for its peer to take the bytes, and nothing
// else moves meanwhile: a peer that takes nothing for the idle timeout
// leaves the pair idle. The caller keeps those write deadlines once its
// own task returned (stop); while it still runs (it may be the one
// writing), a goroutine of its own does (guard).
func (r *runner) interrupt() {
	past := time.Unix(1, 0)
	keeps := r.res.End.KeepsPair()
	up := r.p.Upstream()
	for _, c := range [2]*net.TCPConn{r.p.Client, up} {
		c.SetReadDeadline(past)
		if !keeps {
			c.SetWriteDeadline(past)
		}
	}
	if keeps && r.opts.IdleTimeout > 0 && r.writing > 0 && !r.callerFree {
		r.guarded = true
		r.guardDone = make(chan struct{})
		go func() {
			defer close(r.guardDone)
			WaitWhileTaken(r.quit, r.opts.IdleTimeout, r.p.Client, up)
		}()
	}
}

// stop waits for every task once the splice ended and the caller's task
// returned, and folds into the result what the tasks met meanwhile.
func (r *runner) stop() Result {
	r.mu.Lock()
	res := r.res
	keep := res.End.KeepsPair() && r.opts.IdleTimeout > 0 && r.writing > 0 && !r.guarded
	guardDone := r.guardDone
	r.mu.Unlock()
	up := r.p.Upstream()
	if keep {
		WaitWhileTaken(r.quit, r.opts.IdleTimeout, r.p.Client, up)
	}
	<-r.quit
	if guardDone != nil {
		<-guardDone
	}
	r.mu.Lock()
	late := r.late
	r.mu.Unlock()
	fold(&res, late)
	if res.End == EndReset {
		ArmReset(r.p.Client)
		ArmReset(up)
	}
	if res.End.KeepsPair() {
		for _, c := range [2]*net.TCPConn{r.p.Client, up} {
			c.SetDeadline(time.Time{})
		}
	}
	res.Moved = [2]int64{r.moved[Up].Load(), r.moved[Down].Load()}
	return res
}

// WaitWhileTaken returns when done is closed, keeping the write deadlines
// of conns at idle past the last time each one's peer acknowledged a byte:
// a write to a peer that takes nothing for idle fails with
// os.ErrDeadlineExceeded, one to a slow peer that takes something does not.
// The deadlines are left set.
func WaitWhileTaken(done <-chan struct{}, idle time.Duration, conns ...*net.TCPConn) {
	acked := make([]uint64, len(conns))
	for i, c := range conns {
		acked[i] = ackedBytes(c)
		c.SetWriteDeadline(time.Now().Add(idle))
	}
	tick := time.NewTicker(max(idle/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		for i, c := range conns {
			if a := ackedBytes(c); a != acked[i] {
				acked[i] = a
				c.SetWriteDeadline(time.Now().Add(idle))
			}
		}
	}
}

// ackedBytes is how many bytes c's peer acknowledged (0 if unknown).
func ackedBytes(c *net.TCPConn) uint64 {
	info, err := sockopt.TCPInfo(c)
	if err != nil {
		return 0
	}
	return info.Bytes_acked
}

// fold takes into res what the directions met after the splice ended: a
// FIN forwarded meanwhile marks its direction EOF (and the pair ends once
// both are), and a reset or an error ends a pair the end would have kept.
// The kernel reports a reset once: dropped here, it was lost, and the next
// splice read a plain EOF from the reset socket and passed a FIN on.
func fold(res *Result, evs []event) {
	for _, ev := range evs {
		if ev.kind == evEOF {
			res.EOF[ev.dir] = true
		}
		if end, ok := ev.failure(); ok && res.End.KeepsPair() {
			res.End, res.Dir, res.Err = end, ev.dir, ev.err
		}
	}
	if res.End.KeepsPair() && res.EOF[Up] && res.EOF[Down] {
		res.End = EndEOF
	}
}

// forward runs pump for direction d and returns how it ended.
func (r *runner) forward(d Direction, pump Pump) event {
	src, dst := r.p.Src(d), r.p.Dst(d)
	limit := r.opts.Dir(d).Limit
	err := pump(src, dst, limit, func(n int64) {
		r.moved[d].Add(n)
		r.p.AddBytes(d, n)
		r.last.Store(time.Now().UnixNano())
		r.promoteAtBytes()
	})
	switch {
	case err == nil && limit > 0 && r.moved[d].Load() == limit:
		return event{kind: evLimit, dir: d}
	case err == nil:
		// EOF: every byte before it was written, so the FIN may follow.
		if cerr := r.p.ForwardFIN(d); cerr != nil && !isStop(cerr) {
			return classify(d, cerr)
		}
		return event{kind: evEOF, dir: d}
	}
	return classify(d, err)
}

// promoteAtBytes ends the splice for a promotion once both directions
// together moved Options.Promote.Bytes. The pump that crossed the
// threshold goes on until the interrupt stops it, with every byte it read
// written, as for any end that keeps the pair.
func (r *runner) promoteAtBytes() {
	at := r.opts.Promote.Bytes
	if at <= 0 || r.moved[Up].Load()+r.moved[Down].Load() < at {
		return
	}
	r.promote()
}

// promote sends evPromote, once.
func (r *runner) promote() {
	if r.promoted.CompareAndSwap(false, true) {
		r.send(event{kind: evPromote}, nil)
	}
}

// watch waits until direction d's source has something to read (data, EOF or
// an error) without consuming it.
func (r *runner) watch(d Direction) event {
	if err := WaitReadable(r.p.Src(d)); isStop(err) {
		return event{kind: evStopped, dir: d}
	}
	return event{kind: evData, dir: d}
}

// watchEnds ends the splice when ctx is done, nothing moved for the idle
// timeout, For elapsed or Promote.After did: a place on ctx's watch
// (watchCancel) and callbacks of timers, so that a splice that ends
// first (most pairs) costs no goroutine for them. unwatch stops them;
// one already running sends its event to a loop that no longer takes
// it, which is then kept aside (send) and dropped (stop: fold keeps only
// EOFs and failures).
func (r *runner) watchEnds(ctx context.Context) {
	if ctx.Done() != nil {
		r.watchCancel(ctx)
	}
	if r.opts.For > 0 {
		r.timers[0] = time.AfterFunc(r.opts.For, r.timeUp)
	}
	if r.opts.Promote.After > 0 {
		r.timers[1] = time.AfterFunc(r.opts.Promote.After, r.promote)
	}
	if idle := r.opts.IdleTimeout; idle > 0 {
		// Armed once the field is set, which idleCheck reads.
		r.timers[2] = time.AfterFunc(time.Duration(math.MaxInt64), r.idleCheck)
		r.timers[2].Reset(idle)
	}
}

// unwatch stops what watchEnds started.
func (r *runner) unwatch() {
	r.unwatchCancel()
	for _, t := range r.timers {
		if t != nil {
			t.Stop()
		}
	}
}

// timeUp ends the splice when For elapsed.
func (r *runner) timeUp() { r.send(event{kind: evTimer}, nil) }

// idleCheck ends the splice if nothing moved for the idle timeout, else
// checks again when it would be.
func (r *runner) idleCheck() {
	if left := r.opts.IdleTimeout - time.Since(time.Unix(0, r.last.Load())); left > 0 {
		r.timers[2].Reset(left)
		return
	}
	r.send(event{kind: evIdle}, nil)
}

// failure is how an event that ends the pair ends it: a reset, an error,
// or a write to a peer that took nothing (idle); ok is false for any
// other event.
func (ev event) failure() (end End, ok bool) {
	switch ev.kind {
	case evReset:
		return EndReset, true
	case evError:
		return EndError, true
	case evStalled:
		return EndIdle, true
	}
	return 0, false
}

// classify turns a pump error into an event for direction d.
func classify(d Direction, err error) event {
	switch {
	case errors.Is(err, ErrStalledWrite):
		return event{kind: evStalled, dir: d, err: err}
	case isStop(err):
		return event{kind: evStopped, dir: d}
	case IsReset(err):
		return event{kind: evReset, dir: d, err: err}
	}
	return event{kind: evError, dir: d, err: err}
}

func isStop(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// IsReset reports whether err means the peer reset the connection (or is gone
// in a way TCP reports like a reset).
func IsReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.ENOTCONN) ||
		errors.Is(err, syscall.EHOSTUNREACH)
}

// IsEOF reports whether err is a clean end of stream.
func IsEOF(err error) bool { return errors.Is(err, io.EOF) }

// ArmReset makes the close of c send an RST instead of a FIN (SO_LINGER 0).
// An engine that saw one side of a pair reset arms both sockets, which is
// how the reset is passed to the other side when the forwarder, which owns
// the sockets, closes the pair.
func ArmReset(c *net.TCPConn) {
	if c != nil {
		c.SetLinger(0)
	}
}

// ResetConn closes c with an RST: what a peer (or a test playing one) does
// to reset its connection. Engines arm resets (ArmReset) and never close.
func ResetConn(c *net.TCPConn) {
	if c == nil {
		return
	}
	ArmReset(c)
	c.Close()
}

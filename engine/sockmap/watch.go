// What a running splice watches for: progress, errors, the pump, the limit, flow control and idle, and the waiters that wake it.

package sockmap

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
)

// progress is a number that grows whenever a byte moves.
func (s *splice) progress() int64 {
	n := int64(s.k.flow.Moved + s.k.flow.Redirected)
	for _, p := range []*pump{s.other, s.k.tail} {
		if p != nil {
			n += p.moved.Load()
		}
	}
	return n
}

// check looks at every socket and counter once and acts on what it finds.
// It returns true when it waits for something that sends no event.
func (s *splice) check() (pending bool) {
	flags := s.flags.Swap(0)
	if s.checkErrors() || s.checkPump() || s.checkWatch() {
		return false
	}
	if s.kernel && !s.k.finSent && s.k.tail == nil {
		pending = s.checkKernel(flags)
		if s.done {
			return false
		}
	}
	if (!s.kernel || s.k.finSent) && (s.other == nil || s.other.done) && (s.kernel || s.other != nil) {
		s.end(engine.EndEOF, 0, nil)
	}
	return pending
}

// checkErrors takes pending errors of the sockets nobody else reads: a
// reset ends the splice; ENOMSG is the parser's own stop mark.
func (s *splice) checkErrors() bool {
	for c := range s.waiters {
		errno := soError(c)
		switch {
		case errno == 0:
		case errno == unix.ENOMSG:
			// The parser's stop mark; flow.stopped says which parser.
		case engine.IsReset(errno):
			s.end(engine.EndReset, s.dirFrom(c), errno)
			return true
		default:
			s.end(engine.EndError, s.dirFrom(c), errno)
			return true
		}
	}
	return false
}

// checkPump collects the user-space pumps' results.
func (s *splice) checkPump() bool {
	if s.other != nil {
		if r, ok := s.other.poll(); ok && s.pumpEnded(s.other, r) {
			return true
		}
	}
	if s.k.tail != nil {
		if r, ok := s.k.tail.poll(); ok {
			if r.end == pumpEOF {
				s.k.finSent = true
			}
			return s.pumpEnded(s.k.tail, r)
		}
	}
	return false
}

func (s *splice) pumpEnded(p *pump, r pumpResult) bool {
	switch r.end {
	case pumpEOF:
		s.res.EOF[p.d] = true
		return false
	case pumpLimit:
		s.end(engine.EndLimit, p.d, nil)
	case pumpStopped:
		return false
	case pumpFailed:
		d := p.d
		if r.dst {
			d = 1 - p.d
		}
		switch {
		case errors.Is(r.err, engine.ErrStalledWrite):
			s.end(engine.EndIdle, d, r.err)
		case engine.IsReset(r.err):
			s.end(engine.EndReset, d, r.err)
		default:
			s.end(engine.EndError, d, r.err)
		}
	}
	return true
}

// checkWatch ends the splice when a watched source has something to read.
func (s *splice) checkWatch() bool {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if s.opts.Dir(d).Mode != engine.Watch {
			continue
		}
		ready, err := peek(s.p.Src(d))
		if !ready {
			continue
		}
		if err != nil && engine.IsReset(err) {
			s.end(engine.EndReset, d, err)
		} else {
			s.end(engine.EndData, d, nil)
		}
		return true
	}
	return false
}

// checkKernel follows the kernel direction: limit, credit, pause, EOF.
func (s *splice) checkKernel(flags uint32) (pending bool) {
	k := &s.k
	objs := &s.e.dp.objs
	if k.limit > 0 && k.pre == k.limit {
		s.end(engine.EndLimit, k.d, nil) // reached by predrain alone
		return false
	}
	if err := objs.Flows.Lookup(k.srcCk, &k.flow); err != nil {
		s.end(engine.EndError, k.d, fmt.Errorf("read flow state: %w", err))
		return false
	}
	dw, err := written(k.dst)
	if err != nil {
		s.end(engine.EndError, k.d, err)
		return false
	}
	delivered := dw - k.w0
	k.refused = k.inRx && k.flow.Stopped == k.ctl.Gen || !k.inRx && k.refused
	if k.needTail {
		return s.startTail(delivered, nil)
	}
	drained := k.flow.Moved == k.flow.Redirected && delivered >= k.flow.Redirected
	k.limitHit = k.limit > 0 && k.pre+k.flow.Moved == k.limit

	if !k.eof && readHup(k.src) {
		ti, err := sockopt.TCPInfo(k.src)
		switch {
		case err == nil && ti.Bytes_received == k.pos0+k.flow.Moved+1:
			k.eof = true
		case k.inRx && !s.inMap(s.e.dp.objs.RxSocks, k.srcCk):
			// The socket closed (FIN both ways) and the kernel took it out
			// of the map before its parser read the last segment.
			k.inRx, k.needTail = false, true
			return s.startTail(delivered, errors.New("source left the map"))
		case !k.refused:
			pending = true // the parser has yet to reach the FIN
		}
	}

	switch {
	case k.refused && !k.limitHit && !k.eof:
		pending = s.pauseOrResume(delivered) || pending
	case flags&flagCredit != 0 || k.flow.Moved >= k.ctl.Notify:
		s.extendCredit(delivered)
	}

	if k.eof && drained && !k.finSent {
		if err := s.p.ForwardFIN(k.d); err != nil {
			s.end(engine.EndReset, k.d, err)
			return false
		}
		k.finSent = true
		s.res.EOF[k.d] = true
	}
	if k.limitHit {
		if drained {
			s.end(engine.EndLimit, k.d, nil)
			return false
		}
		pending = true
	}
	if k.eof && !drained {
		pending = true
	}
	if !pending && k.limit > 0 {
		// The limit event may be lost if the ring was full: look again
		// now and then (nothing else would wake a limit reached exactly).
		pending, s.hint = true, limitRecheck
	}
	return pending
}

// extendCredit lets the parser forward one window past what the
// destination has taken.
func (s *splice) extendCredit(delivered uint64) {
	k := &s.k
	k.ctl.Credit = delivered + k.window
	k.ctl.Notify = delivered + k.window/2
	s.e.dp.objs.Ctls.Put(k.srcCk, k.ctl)
}

// pauseOrResume handles a parser that stopped on its credit: the source
// leaves rx_socks (its bytes wait in the TCP receive queue, so TCP pushes
// back on the sender) until the destination has taken half the window, then
// it comes back with a fresh parser.
func (s *splice) pauseOrResume(delivered uint64) (pending bool) {
	k := &s.k
	if k.inRx {
		s.leaveRx()
		soError(k.src) // the parser's ENOMSG, not the proxy's business
		s.e.pauses.Add(1)
	}
	if behind := k.flow.Redirected - min(delivered, k.flow.Redirected); behind > k.window/2 {
		s.hint = k.drainTime(delivered, behind-k.window/2)
		return true
	}
	k.ctl.Gen++
	s.extendCredit(delivered)
	soError(k.src)
	if err := putSock(s.e.dp.objs.RxSocks, k.srcCk, k.src); err != nil {
		if errors.Is(err, unix.EBUSY) {
			// The old psock is still being released: try again shortly,
			// for a while.
			if k.busySince.IsZero() {
				k.busySince = time.Now()
			}
			if time.Since(k.busySince) < time.Second {
				return true
			}
		}
		k.needTail = true
		return s.startTail(delivered, err)
	}
	k.refused, k.busySince = false, time.Time{}
	k.inRx = true
	s.kick()
	return false
}

// drainTime guesses how long the destination needs to take n more bytes,
// from how fast it took the last ones, so a paused source is resumed soon
// after it may be without polling a slow reader often.
func (k *kernelDir) drainTime(delivered, n uint64) time.Duration {
	now := time.Now()
	d := time.Duration(0)
	if !k.sampleAt.IsZero() && delivered > k.sampleDelivered {
		rate := float64(delivered-k.sampleDelivered) / now.Sub(k.sampleAt).Seconds()
		d = time.Duration(float64(n) / rate * float64(time.Second))
	}
	k.sampleAt, k.sampleDelivered = now, delivered
	return min(max(d, minPoll), maxPauseCheck)
}

// startTail moves what is left of the kernel direction in user space, once
// every redirected byte reached the destination (order) and the source's
// waiter is gone (the pump reads the source).
func (s *splice) startTail(delivered uint64, why error) (pending bool) {
	k := &s.k
	if delivered < k.flow.Redirected {
		return true
	}
	s.e.log.Debug("sockmap direction continues in user space", "pair", s.p.ID, "dir", k.d, "why", why)
	s.stopWaiter(k.src)
	var limit int64
	if k.limit > 0 {
		limit = int64(k.limit - k.pre - k.flow.Redirected)
	}
	k.tail = newPump(s, k.d, limit)
	go k.tail.run()
	s.poke()
	return false
}

// checkIdle ends the splice when nothing moved for the idle timeout. Bytes
// a slow reader takes from the destination's send queue count as moving: a
// paused direction with a reader is not idle.
func (s *splice) checkIdle() {
	t := int64(0)
	if s.kernel {
		s.e.dp.objs.Flows.Lookup(s.k.srcCk, &s.k.flow)
		if ti, err := sockopt.TCPInfo(s.k.dst); err == nil {
			t = int64(ti.Bytes_acked)
		}
	}
	t += s.progress()
	now := time.Now()
	if t != s.lastTotal {
		s.lastTotal, s.lastChange = t, now
	}
	left := s.opts.IdleTimeout - now.Sub(s.lastChange)
	if left <= 0 {
		s.end(engine.EndIdle, 0, nil)
		return
	}
	s.idleTimer.Reset(left)
}

// startWaiters parks a goroutine in the netpoller on every socket no pump
// reads, so FIN, RST, parser stops and watched data wake the loop.
func (s *splice) startWaiters() {
	for _, c := range conns(s.p) {
		if (s.other != nil && c == s.other.src) || (s.k.tail != nil && c == s.k.tail.src) {
			continue
		}
		rc, err := c.SyscallConn()
		if err != nil {
			continue
		}
		c.SetReadDeadline(time.Time{}) // a control-mode deadline would end the waiter at once
		exited := make(chan struct{})
		s.waiters[c] = exited
		go func() {
			defer close(exited)
			rc.Read(func(uintptr) bool { s.poke(); return false })
		}()
	}
}

// stopWaiter ends c's waiter and clears the deadline that ended it.
func (s *splice) stopWaiter(c *net.TCPConn) {
	exited, ok := s.waiters[c]
	if !ok {
		return
	}
	c.SetReadDeadline(time.Unix(1, 0))
	<-exited
	c.SetReadDeadline(time.Time{})
	delete(s.waiters, c)
}

func (s *splice) stopWaiters() {
	for c := range s.waiters {
		s.stopWaiter(c)
	}
}

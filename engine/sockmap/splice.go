// One pair's splice: entering the maps, watching for limit, EOF, reset, data and idle, flow control, and leaving the maps without losing a byte.

package sockmap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
)

// flagCredit: the parser used half its credit since the last check.
const flagCredit = 1

// Poll intervals while waiting for something no socket event announces
// (a destination catching up, the parser finishing a queue).
const (
	minPoll = 200 * time.Microsecond
	maxPoll = 20 * time.Millisecond
	// maxPauseCheck bounds the wait between two looks at a paused source.
	maxPauseCheck = 50 * time.Millisecond
	// limitRecheck is how often a limited direction is looked at without
	// an event.
	limitRecheck = time.Second
	// lingerCap bounds the wait for a destination to take its bytes when
	// the pair is being torn down anyway (idle, cancel, error).
	lingerCap = 5 * time.Second
)

// kernelDir is the state of the direction the kernel forwards.
type kernelDir struct {
	d            engine.Direction
	src, dst     *net.TCPConn
	srcCk, dstCk uint64
	pos0         uint64 // src stream position when it entered rx_socks
	w0           uint64 // bytes written into dst before the splice
	limit        uint64 // 0: none
	window       uint64
	ctl          spliceCtl
	inRx, inTx   bool
	refused      bool // the parser refused a byte and stopped
	limitHit     bool
	pre          uint64 // bytes moved by predrain
	needTail     bool   // the source cannot re-enter rx_socks
	eof          bool   // every byte before the FIN was handed to the verdict
	finSent      bool
	flow         spliceFlow // last read
	// delivery rate sample while paused
	sampleAt        time.Time
	sampleDelivered uint64
	busySince       time.Time // first EBUSY while re-entering rx_socks
	// tail pumps the rest in user space once the source cannot re-enter
	// rx_socks after a pause (it received a FIN meanwhile).
	tail *pump
}

// splice is one Splice call: the pair, its options, and what the engine did.
type splice struct {
	e    *Engine
	p    *engine.Pair
	opts engine.Options
	res  engine.Result
	done bool

	kernel bool
	k      kernelDir

	other *pump // the second forwarded direction, in user space

	waiters map[*net.TCPConn]chan struct{} // closed when the waiter exits
	wake    chan struct{}
	flags   atomic.Uint32

	mu       sync.Mutex
	finished bool
	reported [2]int64

	hint time.Duration // when to look again, if check knows better than backoff

	idleTimer  *time.Timer
	lastTotal  int64
	lastChange time.Time
}

func newSplice(e *Engine, p *engine.Pair, opts engine.Options) *splice {
	s := &splice{e: e, p: p, opts: opts, wake: make(chan struct{}, 1), waiters: make(map[*net.TCPConn]chan struct{})}
	var fwd []engine.Direction
	for _, d := range []engine.Direction{engine.Down, engine.Up} {
		if opts.Dir(d).Mode == engine.Forward {
			fwd = append(fwd, d)
		}
	}
	// The kernel takes one direction (Down first: responses are the bulk);
	// a second forwarded direction is pumped in user space, so that no
	// socket is both a parser source and a redirect target (README).
	if len(fwd) > 0 {
		s.kernel, s.k.d = true, fwd[0]
	}
	if len(fwd) > 1 {
		s.other = newPump(s, fwd[1], opts.Dir(fwd[1]).Limit)
	}
	return s
}

// setup puts the kernel direction's sockets into the maps. It returns an
// error (a fallback) only while it has touched no byte.
func (s *splice) setup() error {
	if !s.kernel {
		return nil
	}
	k := &s.k
	k.src, k.dst = s.p.Src(k.d), s.p.Dst(k.d)
	k.limit = uint64(s.opts.Dir(k.d).Limit)
	k.window = uint64(s.e.opts.Window)
	var err error
	if k.srcCk, err = cookie(k.src); err != nil {
		return fmt.Errorf("socket cookie: %w", err)
	}
	if k.dstCk, err = cookie(k.dst); err != nil {
		return fmt.Errorf("socket cookie: %w", err)
	}
	objs := &s.e.dp.objs
	if err := putSock(objs.TxSocks, k.dstCk, k.dst); err != nil {
		return s.userSpace(fmt.Errorf("add destination to sockhash: %w", err))
	}
	k.inTx = true
	// From here on bytes move: errors no longer fall back.
	s.opts.ReportDraining(true)
	err = s.predrain()
	s.opts.ReportDraining(false)
	if err != nil {
		if engine.IsReset(err) {
			s.end(engine.EndReset, k.d, err)
			return nil
		}
		return s.userSpace(err)
	}
	if k.limit > 0 && k.pre == k.limit {
		k.limitHit = true
		return nil
	}
	if k.pos0, err = streamPos(k.src); err != nil {
		return s.userSpace(fmt.Errorf("read source position: %w", err))
	}
	if k.w0, err = writtenExact(k.dst); err != nil {
		return s.userSpace(fmt.Errorf("read destination position: %w", err))
	}
	k.ctl = spliceCtl{Peer: k.dstCk, Credit: k.window, Notify: k.window / 2, Gen: 1}
	if k.limit > 0 {
		k.ctl.Limit = k.limit - k.pre
	}
	if err := objs.Flows.Put(k.srcCk, spliceFlow{}); err != nil {
		return s.userSpace(fmt.Errorf("add flow state: %w", err))
	}
	if err := objs.Ctls.Put(k.srcCk, k.ctl); err != nil {
		return s.userSpace(fmt.Errorf("add flow state: %w", err))
	}
	s.e.register(s, k.srcCk)
	if err := putSock(objs.RxSocks, k.srcCk, k.src); err != nil {
		return s.userSpace(fmt.Errorf("add source to sockhash: %w", err))
	}
	k.inRx = true
	s.kick()
	return nil
}

// kick runs the fresh parser over what arrived since predrain; a reset it
// meets ends the splice (the read took the error from the socket).
func (s *splice) kick() {
	if err := kick(s.k.src); err != nil && engine.IsReset(err) {
		s.end(engine.EndReset, s.k.d, err)
	}
}

// predrain moves the bytes already queued on the source before it enters
// rx_socks. The kernel's parser would start inside the head skb if the
// proxy read part of it, and the parser program is shown the whole skb, so
// it would ask for bytes that never come. After predrain the queue is empty
// and every skb the parser sees starts at its first byte.
func (s *splice) predrain() error {
	k := &s.k
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for {
		buf := *bp
		if k.limit > 0 {
			if k.pre == k.limit {
				return nil
			}
			buf = buf[:min(uint64(len(buf)), k.limit-k.pre)]
		}
		var n int
		var rerr error
		sockopt.WithFD(k.src, func(fd int) error {
			n, _, rerr = unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			return nil
		})
		if n > 0 {
			if _, err := k.dst.Write(buf[:n]); err != nil {
				return fmt.Errorf("move queued bytes: %w", err)
			}
			k.pre += uint64(n)
			s.e.userBytes.Add(uint64(n))
		}
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			return nil
		case rerr != nil:
			return fmt.Errorf("move queued bytes: %w", rerr)
		case n == 0:
			return nil // EOF: the source cannot enter the map; a pump ends it
		}
	}
}

// userSpace decides what a failed map insertion means. A socket that
// already sent or received a FIN can no longer enter a sockhash: that
// direction is pumped in user space instead (falling back for the whole pair
// would gain nothing, and the bytes are the same). Any other error falls
// back, having touched nothing.
func (s *splice) userSpace(err error) error {
	k := &s.k
	if !k.inTx && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	s.leaveRx()
	s.leaveTx()
	s.dropState()
	s.e.unregister(s, k.srcCk)
	var limit int64
	if k.limit > 0 {
		limit = int64(k.limit - k.pre)
	}
	s.e.log.Debug("sockmap direction runs in user space", "pair", s.p.ID, "dir", k.d, "why", err)
	k.tail = newPump(s, k.d, limit)
	return nil
}

// inMap reports whether a sockhash still holds key.
func (s *splice) inMap(m *ebpf.Map, key uint64) bool {
	var v uint64
	return m.Lookup(key, &v) == nil
}

// putSock adds c to a sockhash under key.
func putSock(m *ebpf.Map, key uint64, c *net.TCPConn) error {
	err := sockopt.WithFD(c, func(fd int) error { return m.Put(key, uint64(fd)) })
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w (a socket must be ESTABLISHED: no FIN received or sent)", err)
	}
	return err
}

func (s *splice) dropState() {
	s.e.dp.objs.Ctls.Delete(s.k.srcCk)
	s.e.dp.objs.Flows.Delete(s.k.srcCk)
}

func (s *splice) leaveTx() {
	if s.k.inTx {
		s.e.dp.objs.TxSocks.Delete(s.k.dstCk)
		s.k.inTx = false
	}
}

func (s *splice) leaveRx() {
	if s.k.inRx {
		s.e.dp.objs.RxSocks.Delete(s.k.srcCk)
		s.k.inRx = false
	}
}

// poke wakes the splice's loop.
func (s *splice) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// event records a parser event for the loop. Stops and limits only wake
// it: flow.stopped and flow.moved are the truth, the event may be late.
func (s *splice) event(kind uint32) {
	if kind == eventCredit {
		s.flags.Or(flagCredit)
	}
	s.poke()
}

// run forwards until an end condition, then gives the pair back.
func (s *splice) run(ctx context.Context) engine.Result {
	if !s.kernel {
		s.e.register(s, 0)
	}
	s.startWaiters()
	if s.other != nil {
		go s.other.run()
	}
	if s.k.tail != nil {
		go s.k.tail.run()
	}
	if s.opts.OnSpliced != nil {
		s.opts.OnSpliced()
	}
	var timer <-chan time.Time
	if s.opts.For > 0 {
		t := time.NewTimer(s.opts.For)
		defer t.Stop()
		timer = t.C
	}
	s.lastChange = time.Now()
	var idle <-chan time.Time
	if s.opts.IdleTimeout > 0 {
		t := time.NewTimer(s.opts.IdleTimeout)
		defer t.Stop()
		idle = t.C
		s.idleTimer = t
	}
	poll := time.NewTimer(time.Hour)
	poll.Stop()
	defer poll.Stop()
	interval := minPoll
	for !s.done {
		before := s.progress()
		pending := s.check()
		if s.done {
			break
		}
		if s.progress() != before {
			interval = minPoll
		}
		switch {
		case pending && s.hint > 0:
			poll.Reset(s.hint)
			s.hint = 0
		case pending:
			poll.Reset(interval)
			interval = min(2*interval, maxPoll)
		}
		select {
		case <-s.wake:
		case <-poll.C:
		case <-idle:
			s.checkIdle()
		case <-timer:
			s.end(engine.EndTimer, 0, nil)
		case <-ctx.Done():
			s.end(engine.EndCancel, 0, nil)
		}
		poll.Stop()
	}
	s.finish(ctx)
	return s.res
}

// end records how the splice ends; the first end wins.
func (s *splice) end(e engine.End, d engine.Direction, err error) {
	if s.done {
		return
	}
	s.done = true
	s.res.End, s.res.Dir, s.res.Err = e, d, err
}

// dirFrom returns the direction whose source is c.
func (s *splice) dirFrom(c *net.TCPConn) engine.Direction {
	if c == s.p.Client {
		return engine.Up
	}
	return engine.Down
}

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
		if engine.IsReset(r.err) {
			s.end(engine.EndReset, d, r.err)
		} else {
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

// finish stops every direction, waits until every byte the kernel took was
// delivered, and leaves the maps.
func (s *splice) finish(ctx context.Context) {
	s.stopPump()
	if s.kernel && s.k.tail == nil {
		s.stopKernel(ctx)
	} else if s.kernel {
		s.leaveTx()
		s.dropState()
	}
	s.stopWaiters()
	if s.res.End == engine.EndReset {
		engine.ArmReset(s.p.Client)
		engine.ArmReset(s.p.Upstream())
	}
	if s.kernel {
		s.res.Moved[s.k.d] = int64(s.k.pre + s.k.flow.Redirected)
		if s.k.tail != nil {
			s.res.Moved[s.k.d] += s.k.tail.moved.Load()
		}
	}
	if s.other != nil {
		s.res.Moved[s.other.d] = s.other.moved.Load()
	}
	s.mu.Lock()
	s.finished = true
	for d := range 2 {
		s.p.AddBytes(engine.Direction(d), s.res.Moved[d]-s.reported[d])
		s.reported[d] = s.res.Moved[d]
	}
	s.mu.Unlock()
	s.e.unregister(s, s.k.srcCk)
}

// stopPump stops the user-space pumps; writes in progress complete when
// the pair is handed back.
func (s *splice) stopPump() {
	for _, p := range []*pump{s.other, s.k.tail} {
		if p == nil || p.done {
			continue
		}
		r := p.stop(s.res.End.KeepsPair())
		if r.end == pumpEOF {
			s.res.EOF[p.d] = true
		}
		if r.end == pumpFailed && s.res.End.KeepsPair() {
			s.done = false
			s.pumpEnded(p, r)
		}
	}
}

// stopKernel takes the kernel direction out of the maps without losing a
// byte: the parser is told to stop, the source leaves rx_socks only once its
// parser is quiet, and the destination leaves tx_socks only once it took
// every byte redirected to it.
func (s *splice) stopKernel(ctx context.Context) {
	k := &s.k
	objs := &s.e.dp.objs
	if k.inRx {
		k.ctl.Stop = 1
		objs.Ctls.Put(k.srcCk, k.ctl)
		if s.res.End != engine.EndReset {
			s.waitQuiet()
		}
		s.leaveRx()
		switch errno := soError(k.src); {
		case errno == 0 || errno == unix.ENOMSG:
		case s.res.End.KeepsPair():
			// A reset that arrived while stopping: the proxy must not get
			// a pair that is gone.
			s.res.End, s.res.Err = engine.EndReset, errno
			s.res.Dir = k.d
		}
	}
	objs.Flows.Lookup(k.srcCk, &k.flow)
	if s.res.End != engine.EndReset {
		s.opts.ReportDraining(true)
		s.waitDrained(ctx)
	}
	s.leaveTx()
	s.dropState()
	// A parser that was inside a read while the source left rx_socks may
	// have set its stop mark after the one taken above; the proxy must
	// not read it as the peer's error.
	if errno := soError(k.src); errno != 0 && errno != unix.ENOMSG && s.res.End.KeepsPair() {
		s.res.End, s.res.Dir, s.res.Err = engine.EndReset, k.d, errno
	}
}

// waitQuiet waits until the stopped parser can no longer be inside a read:
// it refused a byte, or it has consumed everything received and every
// parsed message went through the verdict.
func (s *splice) waitQuiet() {
	k := &s.k
	deadline := time.Now().Add(lingerCap)
	for d := minPoll; time.Now().Before(deadline); d = min(2*d, maxPoll) {
		if err := s.e.dp.objs.Flows.Lookup(k.srcCk, &k.flow); err != nil {
			return
		}
		if k.flow.Stopped == k.ctl.Gen || !s.inMap(s.e.dp.objs.RxSocks, k.srcCk) {
			return
		}
		ti, err := sockopt.TCPInfo(k.src)
		if err != nil {
			return
		}
		fin := uint64(0)
		if readHup(k.src) {
			fin = 1
		}
		if ti.Bytes_received == k.pos0+k.flow.Moved+fin && k.flow.Moved == k.flow.Redirected {
			return
		}
		time.Sleep(d)
	}
}

// waitDrained waits until the destination took every redirected byte. A
// pair handed back must be drained in full; one being torn down waits at
// most lingerCap.
func (s *splice) waitDrained(ctx context.Context) {
	k := &s.k
	keep := s.res.End.KeepsPair()
	deadline := time.Now().Add(lingerCap)
	for d := minPoll; ; d = min(2*d, maxPoll) {
		dw, err := written(k.dst)
		if err != nil || dw-k.w0 >= k.flow.Redirected {
			return
		}
		if errno := soError(k.dst); errno != 0 && errno != unix.ENOMSG {
			s.res.End, s.res.Dir, s.res.Err = engine.EndReset, 1-k.d, errno
			return
		}
		if !keep && time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			if keep {
				s.res.End = engine.EndCancel
				keep = false
			}
		case <-time.After(d):
		}
	}
}

// report adds the bytes moved since the last report to the pair's counters.
func (s *splice) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	if s.kernel {
		var f spliceFlow
		if s.e.dp.objs.Flows.Lookup(s.k.srcCk, &f) == nil {
			n := int64(s.k.pre + f.Redirected)
			s.p.AddBytes(s.k.d, n-s.reported[s.k.d])
			s.reported[s.k.d] = n
		}
	}
	if s.other != nil {
		n := s.other.moved.Load()
		s.p.AddBytes(s.other.d, n-s.reported[s.other.d])
		s.reported[s.other.d] = n
	}
}

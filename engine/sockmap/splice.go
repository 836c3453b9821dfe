// One pair's splice: its state, entering the maps, and the loop that runs it until the limit, EOF, a reset or idle (watch.go), then leaving the maps without losing a byte (leave.go).

package sockmap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
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
	switch {
	case err == nil:
	case engine.IsReset(err):
		s.end(engine.EndReset, k.d, err)
		return nil
	case errors.Is(err, engine.ErrStalledWrite):
		s.end(engine.EndIdle, k.d, err)
		return nil
	default:
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
//
// A destination that takes nothing for the idle timeout ends it
// (engine.ErrStalledWrite): the splice has not started, so no watchdog
// would.
func (s *splice) predrain() error {
	k := &s.k
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	idle := s.opts.IdleTimeout
	if idle > 0 {
		defer k.dst.SetWriteDeadline(time.Time{})
	}
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
			if err := writeWhileTaken(k.dst, buf[:n], idle); err != nil {
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

// writeWhileTaken writes b in full to c, failing with
// engine.ErrStalledWrite only when c's peer took none of it for idle (0:
// no bound).
func writeWhileTaken(c *net.TCPConn, b []byte, idle time.Duration) error {
	for len(b) > 0 {
		if idle > 0 {
			c.SetWriteDeadline(time.Now().Add(idle))
		}
		n, err := c.Write(b)
		b = b[n:]
		if err != nil && !(n > 0 && errors.Is(err, os.ErrDeadlineExceeded)) {
			return engine.StalledWrite(err)
		}
	}
	return nil
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

// Engine ip's control plane: splicing an idle pair into the datapath (hold, freeze, learn the peers' clocks, publish, close the sockets) and following it to its end.

package ip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/caps"
)

const (
	// statsEvery is how often a spliced pair's counters are copied to
	// the pair for /flows, and its idle timeout checked.
	statsEvery = 250 * time.Millisecond
	// sweepEvery is how often TIME_WAIT, reset and idle pairs are removed.
	sweepEvery = time.Second
	// learnTimeout bounds the wait for the peers' answers to the window
	// probes, on top of four round trips.
	learnTimeout = 100 * time.Millisecond
)

// Engine is engine ip: the datapath's tc program forwards a spliced pair's
// packets, and the forwarder's two sockets are closed without a trace, or,
// when the splice may give the pair back (byte limits, watched or held
// directions, timers), kept frozen and rebuilt in place when it does
// (unsplice.go). See README.md.
type Engine struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	loaded   bool
	loadErr  error
	closed   bool
	dp       *Datapath
	home     *homeNS
	attached map[int]bool // device indexes in home
	graces   graces
	inject   *injector
	// drained counts pairs spliced with owed bytes, and those bytes.
	drainedPairs, drainedBytes atomic.Int64
	waiters                    map[Tuple]chan notice // by A tuple, while Splice follows the pair
	// kept holds, by A tuple, a descriptor of each pair's frozen upstream
	// socket until the pair leaves the table: it keeps the forwarder's
	// local port, so no new upstream connection reuses the 4-tuple.
	kept map[Tuple]int
	// unspl counts unsplices (unsplice.go).
	unspl unspliceStats
	// clocks holds, by connection tuple, the peers' latest TSvals seen
	// by the datapath when a pair was unspliced, for the next splice.
	clocks map[Tuple]peerClock
	stop   chan struct{}
	wg     sync.WaitGroup
}

// notice is news about a spliced pair for the Splice that follows it.
type notice struct {
	ev Event
	// removed: Sweep removed the pair for this reason ("reset",
	// "time_wait", "idle").
	removed string
}

// New returns engine ip with the datapath options opts (MaxPairs, TimeWait,
// IdleTimeout for pairs whose ends vanished). Nothing is loaded until Probe
// or the first Splice, which must run in the network namespace whose
// devices reach clients and servers. A nil log discards.
func New(opts Options, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{
		opts:     opts,
		log:      log.With("engine", "ip"),
		attached: make(map[int]bool),
		waiters:  make(map[Tuple]chan notice),
		kept:     make(map[Tuple]int),
		stop:     make(chan struct{}),
		inject:   newInjector(),
	}
}

// Name implements engine.Engine.
func (e *Engine) Name() string { return "ip" }

// Probe implements engine.Engine: it loads the datapath (once) in the
// calling thread's network namespace. Its error names the missing
// privilege (CAP_BPF, CAP_NET_ADMIN) or kernel feature.
func (e *Engine) Probe() error { return e.load() }

func (e *Engine) load() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if !e.loaded {
		e.loaded = true
		e.loadErr = e.loadLocked()
	}
	return e.loadErr
}

func (e *Engine) loadLocked() error {
	if err := caps.RequireBPF("engine ip"); err != nil {
		return err
	}
	home, err := openHomeNS()
	if err != nil {
		return err
	}
	dp, err := Load(e.opts)
	if err != nil {
		home.close()
		return err
	}
	e.home, e.dp = home, dp
	e.wg.Add(2)
	go func() { defer e.wg.Done(); e.readEvents() }()
	go func() { defer e.wg.Done(); e.sweep() }()
	return nil
}

// Supports implements engine.Engine. Byte limits, watched and held
// directions and timers are done by unsplicing (unsplice.go).
func (e *Engine) Supports(p *engine.Pair, opts engine.Options) error {
	if p.Upstream() == nil {
		return errors.New("the pair has no upstream connection")
	}
	return supportsUnsplice(opts)
}

// Close implements engine.Engine: it detaches the program from every device
// and frees the table. Pairs still spliced then reach the forwarder's
// stack, which no longer has their sockets, and are reset.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	dp, home := e.dp, e.home
	e.mu.Unlock()
	if dp == nil {
		return nil
	}
	close(e.stop)
	// The kept sockets go first: once the program is detached, the
	// pairs' segments would reach them, and a frozen socket may answer.
	e.mu.Lock()
	for a := range e.kept {
		e.releaseLocked(a)
	}
	e.mu.Unlock()
	err := dp.Close() // ends readEvents
	e.wg.Wait()
	e.inject.close()
	home.close()
	return err
}

// Splice implements engine.Engine. It returns a *engine.FallbackError,
// having changed nothing on either connection, when the pair cannot be
// spliced (data buffered, options the datapath cannot translate, a peer on
// this host, a full table, a peer that does not answer the timestamp
// probe). Otherwise the datapath forwards the pair; Splice follows it
// until both FINs are acknowledged (EndEOF, the pair stays in TIME_WAIT),
// a reset (EndReset), IdleTimeout (EndIdle) or ctx (EndCancel), with the
// forwarder's sockets closed; or until a limit, data in a watched
// direction or opts.For gives the pair back on the same sockets (EndLimit,
// EndData, EndTimer). On EndIdle and EndCancel the pair is removed: the
// peers' next segments are answered with resets by the forwarder's stack.
func (e *Engine) Splice(ctx context.Context, p *engine.Pair, opts engine.Options) (engine.Result, error) {
	if err := e.Supports(p, opts); err != nil {
		return engine.Result{}, engine.Fallback("ip", "%v", err)
	}
	if err := e.load(); err != nil {
		return engine.Result{}, engine.Fallback("ip", "%v", err)
	}
	if err := queuedPastBoundary(p, opts); err != nil {
		return engine.Result{}, engine.Fallback("ip", "%v", err)
	}
	sp, err := e.spliceOnOwnStack(p, opts)
	if err != nil {
		return engine.Result{}, err
	}
	if opts.OnSpliced != nil {
		opts.OnSpliced()
	}
	return e.follow(ctx, p, sp, opts), nil
}

// spliceOnOwnStack runs splice on a goroutine of its own. Splicing goes
// deep (netlink, repair-mode reads, map updates) and grows a goroutine's
// stack to 16-32 KiB, which the caller's goroutine would then keep, idle,
// for the whole life of the pair; a short-lived goroutine hands it back
// for the next splice instead (measured: 24 KiB of stack per spliced pair
// at 10,000 pairs without this).
func (e *Engine) spliceOnOwnStack(p *engine.Pair, opts engine.Options) (spliced, error) {
	type result struct {
		sp  spliced
		err error
	}
	ch := make(chan result, 1)
	go func() {
		sp, err := e.splice(p, opts)
		ch <- result{sp, err}
	}()
	r := <-ch
	return r.sp, r.err
}

// spliced is a pair splice put in the datapath.
type spliced struct {
	a    Tuple
	ch   <-chan notice
	spec PairSpec // as published
	// drain delivers the bytes the forwarder held at splice time; nil
	// when it held none.
	drain *drainer
	// unread counts, per direction, the bytes of the input socket's
	// receive queue that the drain delivers: the proxy never counted them.
	unread [2]int64
	// seed is each direction's SndNxt when published; seedFIN: it
	// includes a FIN already received.
	seed    [2]uint32
	seedFIN [2]bool
	// fz, for a splice that may end in control mode, holds what
	// unsplicing needs; the sockets then stay open, frozen.
	fz *frozen
	// since is Now() before the pair was inserted: events stamped
	// earlier belong to an earlier splice of the same tuples, read late.
	since time.Duration
}

// splice puts the pair in the datapath and closes its sockets; it returns
// the pair's A tuple, the channel its news arrives on and the bytes still
// to deliver, or a *engine.FallbackError.
func (e *Engine) splice(p *engine.Pair, opts engine.Options) (spliced, error) {
	client, up := p.Client, p.Upstream()
	pa, err := e.locate(client)
	if err != nil {
		return spliced{}, engine.Fallback("ip", "client connection: %v", err)
	}
	pb, err := e.locate(up)
	if err != nil {
		return spliced{}, engine.Fallback("ip", "upstream connection: %v", err)
	}
	if err := e.attach(pa.Ifindex, pb.Ifindex); err != nil {
		return spliced{}, engine.Fallback("ip", "%v", err)
	}

	// Hold first: from here on no segment of either connection reaches
	// its socket, so what the frozen sockets report stays true.
	hold := DirSpec{DirMode: DirMode{Mode: engine.Hold}}
	spec := PairSpec{
		A: Tuple{Src: pa.Remote, Dst: pa.Local}, B: Tuple{Src: pb.Remote, Dst: pb.Local},
		IfindexA: pa.Ifindex, IfindexB: pb.Ifindex, Up: hold, Down: hold,
	}
	ch := e.register(spec.A)
	since := Now()
	if err := e.dp.Insert(spec); err != nil {
		e.unregister(spec.A)
		return spliced{}, engine.Fallback("ip", "%v", err)
	}
	undo := func(format string, args ...any) (spliced, error) {
		// Thaw before Delete: segments are still held meanwhile, and the
		// peers retransmit what the hold dropped to the live sockets.
		errs := []error{thawSock(client), thawSock(up), e.dp.Delete(spec.A)}
		e.unregister(spec.A)
		if err := errors.Join(errs...); err != nil {
			e.log.Warn("undoing a splice that fell back", "pair", p.ID, "err", err)
		}
		return spliced{}, engine.Fallback("ip", format, args...)
	}
	grace := e.graces.start()

	sa, err := freezeSock(client)
	if err != nil {
		return undo("freeze the client connection: %v", err)
	}
	sb, err := freezeSock(up)
	if err != nil {
		return undo("freeze the upstream connection: %v", err)
	}
	sa.params.Ifindex, sb.params.Ifindex = pa.Ifindex, pb.Ifindex
	if reason := unspliceable(sa, sb); reason != "" {
		return undo("%s", reason)
	}
	if err := CanTranslate(sa.params, sb.params); err != nil {
		return undo("%v", err)
	}
	var probed time.Time
	// A peer whose connection was unspliced before needs no probe: its
	// clock is known from then (unsplice.go).
	known := e.recallClocks(spec.A, spec.B)
	if sa.params.Timestamps {
		// The probes' answers travel while the grace period runs.
		probed = time.Now()
		if err := e.probeClocks(client, up, sa, sb, known); err != nil {
			return undo("%v", err)
		}
	}
	<-grace
	// Segments that were already past tc when the pair was inserted have
	// reached the sockets by now: this reading is final.
	if sa, sb, err = rereadPair(client, up, sa, sb); err != nil {
		return undo("%v", err)
	}
	pa, pb = sa.params, sb.params
	if pa.Timestamps {
		if err := e.learnClocks(client, up, sa, sb, &pa, &pb, probed, 4*max(sa.rtt, sb.rtt)+learnTimeout, known); err != nil {
			return undo("%v", err)
		}
	}
	sa.params, sb.params = pa, pb
	d, err := e.owedBytes(client, up, sa, sb)
	if err != nil {
		return undo("%v", err)
	}
	var fz *frozen
	if unsplicing(opts) {
		if err := prepareUnsplice(opts, &d.spec, sa, sb); err != nil {
			return undo("%v", err)
		}
		if fz, err = freezeForUnsplice(client, up, sa, sb); err != nil {
			return undo("%v", err)
		}
	}
	if err := e.dp.Update(d.spec); err != nil {
		return undo("%v", err)
	}
	if err := e.keep(spec.A, up); err != nil {
		e.log.Warn("keeping the upstream socket's port", "pair", p.ID, "err", err)
	}
	// Both sockets are in repair mode: closing them sends nothing. The
	// forwarder closes the connections again later, which is harmless.
	// A splice that may unsplice keeps them, frozen, to rebuild them.
	if fz == nil {
		if err := errors.Join(client.Close(), up.Close()); err != nil {
			e.log.Warn("closing spliced sockets", "pair", p.ID, "err", err)
		}
	}
	sp := spliced{a: spec.A, ch: ch, spec: d.spec, fz: fz, since: since, unread: [2]int64{int64(sa.inq), int64(sb.inq)},
		seed:    [2]uint32{d.spec.Up.SndNxt, d.spec.Down.SndNxt},
		seedFIN: [2]bool{d.spec.Up.FINSeen, d.spec.Down.FINSeen}}
	if len(d.dirs) > 0 {
		sp.drain = d
		e.drainedPairs.Add(1)
		for _, o := range d.dirs {
			e.drainedBytes.Add(int64(len(o.data)))
		}
	}
	return sp, nil
}

// owedBytes reads what the frozen sockets hold for their peers and returns
// the final spec, with offsets that leave room for those bytes, and the
// drainer that delivers them: toward the server, the upstream socket's
// send queue then the client socket's receive queue; toward the client,
// the mirror.
func (e *Engine) owedBytes(client, up *net.TCPConn, sa, sb sockState) (*drainer, error) {
	pa, pb := sa.params, sb.params
	// A FIN received and acknowledged is owed too, after the bytes.
	pa.WriteSeq += uint32(sb.inq) + b2u(sb.finReceived)
	pb.WriteSeq += uint32(sa.inq) + b2u(sa.finReceived)
	spec, err := NewPairSpec(pa, pb)
	if err != nil {
		return nil, err
	}
	spec.Up.FINSeen, spec.Down.FINSeen = sa.finReceived, sb.finReceived
	d := &drainer{dp: e.dp, in: e.inject, a: spec.A, spec: spec}
	upOwed := sb.outq + sa.inq + int(b2u(sa.finReceived))
	downOwed := sa.outq + sb.inq + int(b2u(sb.finReceived))
	// The datapath drops acks lagging more than a window's span behind
	// what was sent; the receiver acknowledges the owed bytes from below.
	if lim := guardSpan(max(spec.Down.InShift, spec.Down.OutShift)); upOwed >= lim {
		return nil, fmt.Errorf("%d bytes owed to the server, more than the ack guard's span of %d", upOwed, lim)
	}
	if lim := guardSpan(max(spec.Up.InShift, spec.Up.OutShift)); downOwed >= lim {
		return nil, fmt.Errorf("%d bytes owed to the client, more than the ack guard's span of %d", downOwed, lim)
	}
	for _, o := range []struct {
		dir       engine.Direction
		out, in   *net.TCPConn
		sOut, sIn sockState
		n         int
	}{{engine.Up, up, client, sb, sa, upOwed}, {engine.Down, client, up, sa, sb, downOwed}} {
		if o.n == 0 {
			continue
		}
		ow, err := e.owedDir(o.dir, o.out, o.in, o.sOut, o.sIn)
		if err != nil {
			return nil, err
		}
		d.dirs = append(d.dirs, ow)
	}
	if len(d.dirs) > 0 {
		fd, err := e.inject.open(pa.Local.Addr().Is6(), e.home.do)
		if err != nil {
			return nil, err
		}
		d.fd = fd
	}
	return d, nil
}

// owedDir reads one direction's owed bytes: out's send queue and in's
// receive queue, which follows it on the output connection.
func (e *Engine) owedDir(dir engine.Direction, out, in *net.TCPConn, sOut, sIn sockState) (*owed, error) {
	sent, err := peekQueue(out, tcpSendQueue, sOut.outq)
	if err != nil {
		return nil, fmt.Errorf("read the %v send queue: %w", dir, err)
	}
	unread, err := peekQueue(in, tcpRecvQueue, sIn.inq)
	if err != nil {
		return nil, fmt.Errorf("read the %v receive queue: %w", dir, err)
	}
	w, err := readRepairWindow(out)
	if err != nil {
		return nil, err
	}
	po := sOut.params
	win := uint64(w.rcvWup+w.rcvWnd-po.RcvNxt) >> po.RcvWScale
	mss := sOut.sndMSS
	if mss <= 0 {
		mss = 536
	}
	return &owed{
		dir:   dir,
		fin:   sIn.finReceived,
		src:   po.Local,
		dst:   po.Remote,
		start: po.SndUna,
		data:  append(sent, unread...),
		mss:   mss,
		ts:    po.Timestamps,
		edge0: po.SndUna + w.sndWnd,
		ack0:  po.RcvNxt,
		win0:  uint16(min(win, 0xffff)),
		// 4 srtt, within the drain's bounds: a socket that waited on a
		// closed window may report a smoothed RTT of seconds.
		rto0: min(max(drainMinRTO, 4*sOut.rtt), drainMaxRTO),
	}, nil
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// guardSpan is win_span of the datapath: how far acks may lag.
func guardSpan(shift uint8) int { return 65536 << min(shift, 14) }

// unspliceable says why two frozen sockets cannot be spliced by this cut,
// or "".
func unspliceable(a, b sockState) string {
	switch {
	case !a.established || !b.established:
		return fmt.Sprintf("a connection is not established (the forwarder sent a FIN, or is not connected): client side state %d, upstream side %d", a.state, b.state)
	case a.params.Timestamps && a.usecTS != b.usecTS:
		return "timestamps tick in microseconds on one connection only"
	}
	return ""
}

// locate returns c's addresses and the device toward its peer, after
// checking that the datapath can see c's packets at all.
func (e *Engine) locate(c *net.TCPConn) (ConnParams, error) {
	var cp ConnParams
	if c == nil {
		return cp, errors.New("no connection")
	}
	local, remote, err := addrs(c)
	if err != nil {
		return cp, err
	}
	proto, err := sockProtocol(c)
	if err != nil {
		return cp, err
	}
	if proto != unix.IPPROTO_TCP {
		return cp, errors.New("an MPTCP socket: its subflows' sequence numbers are not the socket's")
	}
	ino, err := sockNetnsInode(c)
	if err != nil {
		return cp, err
	}
	if ino != e.home.ino {
		return cp, errors.New("the socket is in another network namespace than the one engine ip was loaded in")
	}
	ifindex, err := e.home.deviceTo(remote.Addr())
	if err != nil {
		return cp, err
	}
	return ConnParams{Local: local, Remote: remote, Ifindex: ifindex}, nil
}

// attach attaches the program to each device once.
func (e *Engine) attach(ifindexes ...int) error {
	for _, i := range ifindexes {
		e.mu.Lock()
		done := e.attached[i]
		e.mu.Unlock()
		if done {
			continue
		}
		if err := e.home.do(func() error { return e.dp.Attach(i) }); err != nil {
			return err
		}
		e.mu.Lock()
		e.attached[i] = true
		e.mu.Unlock()
	}
	return nil
}

// probeClocks makes both frozen sockets send a window probe, except
// toward a peer whose clock is known; the peers answer with an ACK
// carrying their current TSval, which the held pair records (learnClocks
// reads it).
func (e *Engine) probeClocks(client, up *net.TCPConn, sa, sb sockState, known knownClocks) error {
	held, err := NewPairSpec(sa.params, sb.params)
	if err != nil {
		return err
	}
	// Seed the seq guard so the answers count as the peers' own.
	held.Up.Mode, held.Down.Mode = engine.Hold, engine.Hold
	if err := e.dp.Update(held); err != nil {
		return err
	}
	var errs []error
	if !known.haveClient {
		errs = append(errs, e.poke(client, sa))
	}
	if !known.haveServer {
		errs = append(errs, e.poke(up, sb))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("window probe: %w", err)
	}
	return nil
}

// poke makes c's peer send an ACK with its current TSval: c sends a
// window probe, or, in CLOSE_WAIT where Linux sends none, the engine
// injects the same probe itself.
func (e *Engine) poke(c *net.TCPConn, s sockState) error {
	if !s.finReceived {
		return pokeSock(c)
	}
	ts, err := sockTSClock(c)
	if err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	p := s.params
	fd, err := e.inject.open(p.Local.Addr().Is6(), e.home.do)
	if err != nil {
		return err
	}
	var buf [60 + tsOptLen]byte
	pkt := buildSegment(buf[:], p.Local, p.Remote, p.SndUna-1, segFields{ack: p.RcvNxt, win: 0xffff, ts: true, tsVal: ts}, nil)
	return e.inject.send(fd, p.Remote.Addr(), pkt)
}

// rereadPair reads both frozen sockets again: segments may have reached
// them since the first reading.
func rereadPair(client, up *net.TCPConn, sa, sb sockState) (sockState, sockState, error) {
	na, err := rereadSock(client, sa)
	if err != nil {
		return sa, sb, fmt.Errorf("read the client connection: %w", err)
	}
	nb, err := rereadSock(up, sb)
	if err != nil {
		return sa, sb, fmt.Errorf("read the upstream connection: %w", err)
	}
	if reason := unspliceable(na, nb); reason != "" {
		return sa, sb, errors.New(reason)
	}
	return na, nb, nil
}

// learnClocks waits for the TSvals the probes' answers carried (probing
// again once if one is missing; a known one needs no answer), then reads the sockets' own clocks,
// which are at least the TSval of anything they sent.
func (e *Engine) learnClocks(client, up *net.TCPConn, sa, sb sockState, pa, pb *ConnParams, probed time.Time, timeout time.Duration, known knownClocks) error {
	a := Tuple{Src: pa.Remote, Dst: pa.Local}
	st, err := e.awaitClockAnswers(a, time.Now().Add(timeout), known)
	for try := 0; err == nil && !clockAnswered(st) && try < reprobes; try++ {
		// Lost, or never sent: Linux answers at most one out-of-window
		// segment per reprobeAfter per socket, and a peer under loss
		// may just have answered another one.
		time.Sleep(time.Until(probed.Add(reprobeAfter)))
		if st, err = e.dp.Lookup(a); err == nil {
			st = known.fill(st)
		}
		if err != nil || clockAnswered(st) {
			break
		}
		probed = time.Now()
		if st.Up.TSLast == 0 {
			err = e.poke(client, sa)
		}
		if err == nil && st.Down.TSLast == 0 {
			err = e.poke(up, sb)
		}
		if err != nil {
			return fmt.Errorf("window probe: %w", err)
		}
		st, err = e.awaitClockAnswers(a, time.Now().Add(timeout), known)
	}
	if err != nil {
		return err
	}
	if !clockAnswered(st) {
		return fmt.Errorf("no answer to the timestamp probe, asked %d times, within %v of each (client %v, server %v)",
			1+reprobes, timeout, st.Up.TSLast != 0, st.Down.TSLast != 0)
	}
	pa.PeerTSVal, pb.PeerTSVal = st.Up.TSLast, st.Down.TSLast
	if pa.TSVal, err = sockTSClock(client); err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	if pb.TSVal, err = sockTSClock(up); err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	pa.TSVal += tsLead(sa.usecTS)
	pb.TSVal += tsLead(sa.usecTS)
	return nil
}

const (
	// reprobeAfter is how long after a probe a missing answer is asked
	// for again: Linux rate-limits its answers to out-of-window segments
	// to one per 500 ms per socket (tcp_invalid_ratelimit).
	reprobeAfter = 510 * time.Millisecond
	// reprobes is how many times a missing answer is asked for again
	// before falling back; the pair is held (its packets dropped)
	// meanwhile, which its peers pay for with their retransmission
	// timeouts.
	reprobes = 1
)

// clockAnswered: the held pair has seen both peers' TSvals.
func clockAnswered(st PairStats) bool { return st.Up.TSLast != 0 && st.Down.TSLast != 0 }

// awaitClockAnswers polls the held pair a until both peers' TSvals are
// known (seen by the datapath, or from an earlier unsplice) or deadline
// passes, and returns its last state.
func (e *Engine) awaitClockAnswers(a Tuple, deadline time.Time, known knownClocks) (PairStats, error) {
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 2*time.Millisecond) {
		st, err := e.dp.Lookup(a)
		if err == nil {
			st = known.fill(st)
		}
		if err != nil || clockAnswered(st) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(wait)
	}
}

// tsLeadTime is how far ahead of its timestamp clock a socket's TSvals
// may have run. Linux stamps a segment with its earliest departure time
// (EDT): a paced socket (BBR, fq) puts TSvals on the wire up to one
// burst's pacing delay ahead of TCP_TIMESTAMP, measured here up to 33 ms.
// Translated TSvals below the peer's last one would be refused as old
// (PAWS: dropped, answered with a duplicate ACK) until the clock caught
// up; a jump forward costs nothing, as the peer accepts any newer TSval
// and the echoes are translated back exactly.
const tsLeadTime = 100 * time.Millisecond

// tsLead is tsLeadTime in timestamp ticks.
func tsLead(usecTS bool) uint32 {
	if usecTS {
		return uint32(tsLeadTime / time.Microsecond)
	}
	return uint32(tsLeadTime / time.Millisecond)
}

// follow waits for the spliced pair to end, copying its byte counters
// to p as they grow; meanwhile it delivers the bytes owed at splice time,
// with the pair in StateDraining until they are acknowledged.
func (e *Engine) follow(ctx context.Context, p *engine.Pair, sp spliced, opts engine.Options) engine.Result {
	a, ch := sp.a, sp.ch
	defer e.unregister(a)
	f := follower{p: p, a: a, dp: e.dp, release: e.release, resetPeers: func(st PairStats) { e.resetPeers(sp.spec, st) }, lastMove: time.Now(), extra: sp.unread, seed: sp.seed, seedFIN: sp.seedFIN}
	if sp.drain != nil {
		f.drained = sp.drain.lastProgress
	}
	for d, n := range sp.unread {
		p.AddBytes(engine.Direction(d), n)
		f.counted[d] = n
	}
	var drained chan error
	if sp.drain != nil {
		p.SetState(engine.StateDraining)
		drained = make(chan error, 1)
		stop := make(chan struct{})
		defer close(stop)
		go func() { drained <- sp.drain.run(stop) }()
	}
	var u *unsplicer
	if sp.fz != nil {
		u = newUnsplicer(e, p, sp, opts)
		defer u.stop()
	}
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		select {
		case <-u.timerC():
			return u.unsplice(&f, ch, engine.EndTimer, engine.Up)
		case err := <-drained:
			drained = nil
			if err == nil {
				p.SetState(engine.StateSpliced)
			}
			sp.drain.logDone(e.log, p.ID, err)
		case <-ctx.Done():
			f.refresh()
			f.remove()
			return closedIfKept(p, sp, f.end(engine.EndCancel, nil))
		case n := <-ch:
			if n.removed == "" && n.ev.Time < sp.since {
				continue // an earlier splice's, read late
			}
			if u != nil && n.removed == "" && n.ev.Kind == EventFIN {
				u = u.plain(f.a) // a half-closed pair cannot be rebuilt: it runs to its end
			}
			if u != nil && n.removed == "" {
				if end, dir, ok := u.onEvent(n.ev); ok {
					return u.unsplice(&f, ch, end, dir)
				}
			}
			if res, done := f.onNotice(n); done {
				return closedIfKept(p, sp, res)
			}
		case <-tick.C:
			if res, done := f.onTick(opts.IdleTimeout); done {
				return closedIfKept(p, sp, res)
			}
			if u != nil {
				if end, dir, ok := u.onStats(f.last); ok {
					return u.unsplice(&f, ch, end, dir)
				}
			}
		}
	}
}

// follower is the state of one followed pair.
type follower struct {
	// resetPeers resets both peers of the removed pair.
	resetPeers func(PairStats)
	// release frees what the engine keeps for the pair once it leaves
	// the table.
	release func(Tuple)
	p       *engine.Pair
	a       Tuple
	dp      *Datapath
	counted [2]int64 // bytes already added to p
	// acked is each direction's highest ACK when last seen: a pair whose
	// ACKs advance is not idle.
	acked [2]uint32
	// extra: bytes counted at splice time (the unread receive queues)
	// on top of the datapath's counters.
	extra   [2]int64
	seed    [2]uint32
	seedFIN [2]bool
	eof     [2]bool
	// closedClean: both FINs were acknowledged. A reset after that (say,
	// a peer that already forgot the connection answering a late
	// segment) does not turn the clean end into a reset.
	closedClean bool
	resetDir    engine.Direction
	lastMove    time.Time
	// drained, if set, says when the drain last delivered owed bytes:
	// that is movement too, though the datapath's counters stand still.
	drained func() time.Time
	// last is the pair's state at the latest refresh (its Phase too).
	last PairStats
}

// refresh copies the pair's counters to p; false when the pair is gone.
func (f *follower) refresh() (bool, error) {
	st, err := f.dp.Lookup(f.a)
	if err != nil {
		return false, err
	}
	f.last = st
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		ds := st.Dir(d)
		// A correction of streamBytes may take the count back by a byte.
		if n := int64(f.streamBytes(d, ds)) + f.extra[d]; n != f.counted[d] {
			f.p.AddBytes(d, n-f.counted[d])
			if n > f.counted[d] {
				f.lastMove = time.Now()
			}
			f.counted[d] = n
		}
		f.eof[d] = f.eof[d] || ds.FIN
		// Retransmissions filling holes move no new byte, but a
		// receiver acknowledging them is progress all the same.
		if ds.AckHi != f.acked[d] {
			f.acked[d] = ds.AckHi
			f.lastMove = time.Now()
		}
	}
	if f.drained != nil {
		if t := f.drained(); t.After(f.lastMove) {
			f.lastMove = t
		}
	}
	f.closedClean = f.closedClean || (st.Up.FIN && st.Up.FINAcked && st.Down.FIN && st.Down.FINAcked)
	return true, nil
}

// streamBytes is the datapath's byte count of direction d. Once the
// direction's FIN was forwarded its low 32 bits must equal the sequence
// distance from the published SndNxt to the FIN: the pair's count has been
// seen one over after a mid-stream splice (1 pair in about 50, cause not
// found yet), so the distance, which is exact, corrects it.
func (f *follower) streamBytes(d engine.Direction, ds DirStats) uint64 {
	if !ds.FIN {
		return ds.Bytes
	}
	dist := ds.SndNxt - f.seed[d]
	if !f.seedFIN[d] {
		dist-- // the FIN takes one sequence number
	}
	// Lookup's fields are not one snapshot: trust the distance only when
	// it is close to the counter.
	over := int32(uint32(ds.Bytes) - dist)
	if over != 0 && over > -16 && over < 16 {
		return uint64(int64(ds.Bytes) - int64(over))
	}
	return ds.Bytes
}

// remove deletes the pair; one Sweep already removed needs nothing more.
func (f *follower) remove() {
	st, err := f.dp.Lookup(f.a)
	f.dp.Delete(f.a)
	if f.release != nil {
		f.release(f.a)
	}
	if err == nil && f.resetPeers != nil && st.Phase != PhaseClosed {
		f.resetPeers(st)
	}
}

func (f *follower) end(end engine.End, err error) engine.Result {
	r := engine.Result{End: end, Moved: f.counted, EOF: f.eof, Err: err}
	if end == engine.EndReset {
		r.Dir = f.resetDir
	}
	return r
}

func (f *follower) onNotice(n notice) (engine.Result, bool) {
	if n.removed != "" {
		return f.gone(n.removed), true
	}
	f.refresh()
	switch n.ev.Kind {
	case EventFIN:
		f.eof[n.ev.Dir] = true
	case EventReset:
		if f.closedClean {
			return f.end(engine.EndEOF, nil), true
		}
		f.resetDir = n.ev.Dir
		return f.end(engine.EndReset, nil), true
	case EventTimeWait:
		return f.end(engine.EndEOF, nil), true
	}
	return engine.Result{}, false
}

// onTick catches what events may have missed (a full ring buffer) and
// enforces the idle timeout.
func (f *follower) onTick(idle time.Duration) (engine.Result, bool) {
	ok, err := f.refresh()
	switch {
	case errors.Is(err, ErrNotFound):
		return f.gone(""), true
	case err != nil || !ok:
		return f.end(engine.EndError, err), true
	case f.closedClean || f.last.Phase == PhaseTimeWait:
		return f.end(engine.EndEOF, nil), true
	case f.last.Phase == PhaseClosed:
		return f.end(engine.EndReset, nil), true
	case idle > 0 && time.Since(f.lastMove) >= idle:
		f.remove()
		return f.end(engine.EndIdle, nil), true
	}
	return engine.Result{}, false
}

// gone ends a pair that Sweep removed, for reason if known.
func (f *follower) gone(reason string) engine.Result {
	switch {
	case f.closedClean:
		return f.end(engine.EndEOF, nil)
	case reason == "reset" || f.last.Phase == PhaseClosed:
		return f.end(engine.EndReset, nil)
	case reason == "time_wait" || f.last.Phase == PhaseTimeWait:
		return f.end(engine.EndEOF, nil)
	}
	return f.end(engine.EndIdle, nil)
}

// resetPeers sends each peer of a pair just removed from the table (on
// cancel or idle) a reset at the highest sequence number forwarded to it.
// A peer that has received everything accepts it; one with bytes still in
// flight answers with a challenge ACK, which now reaches the forwarder's
// stack, which has no socket for it and resets it exactly.
func (e *Engine) resetPeers(spec PairSpec, st PairStats) {
	fd, err := e.inject.open(spec.A.Src.Addr().Is6(), e.home.do)
	if err != nil {
		e.log.Warn("resetting the peers of a removed pair", "err", err)
		return
	}
	var buf [60]byte
	toClient := buildSegment(buf[:], spec.A.Dst, spec.A.Src, st.Down.SndNxt+spec.Down.SeqOff, segFields{ack: st.Up.SndNxt, flags: 0x14}, nil)
	e.inject.send(fd, spec.A.Src.Addr(), toClient)
	toServer := buildSegment(buf[:], spec.B.Dst, spec.B.Src, st.Up.SndNxt+spec.Up.SeqOff, segFields{ack: st.Down.SndNxt, flags: 0x14}, nil)
	e.inject.send(fd, spec.B.Src.Addr(), toServer)
}

// keep duplicates up's descriptor for pair a. The duplicate stays frozen
// (it sends nothing, and its keepalive is off: a keepalive timeout would
// send a reset) and stays in the established table, so the kernel picks
// another port for new connections to the same server.
func (e *Engine) keep(a Tuple, up *net.TCPConn) error {
	var fd int
	err := withFD(up, func(ofd int) error {
		var err error
		if fd, err = unix.FcntlInt(uintptr(ofd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		unix.Close(fd)
		return nil
	}
	if old, ok := e.kept[a]; ok {
		unix.Close(old)
	}
	e.kept[a] = fd
	return nil
}

// release closes the descriptor kept for pair a, if any: the socket is
// still in repair mode, so closing sends nothing.
func (e *Engine) release(a Tuple) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(a)
}

func (e *Engine) releaseLocked(a Tuple) {
	if fd, ok := e.kept[a]; ok {
		unix.Close(fd)
		delete(e.kept, a)
	}
}

func (e *Engine) register(a Tuple) chan notice {
	ch := make(chan notice, 8)
	e.mu.Lock()
	e.waiters[a] = ch
	e.mu.Unlock()
	return ch
}

func (e *Engine) unregister(a Tuple) {
	e.mu.Lock()
	delete(e.waiters, a)
	e.mu.Unlock()
}

// notify passes n to the Splice following pair a, if any. It never
// blocks: a waiter that is behind catches up from Lookup on its next tick.
func (e *Engine) notify(a Tuple, n notice) {
	e.mu.Lock()
	ch := e.waiters[a]
	e.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- n:
	default:
	}
}

// readEvents hands the program's events to the pairs' followers until the
// datapath closes.
func (e *Engine) readEvents() {
	for {
		ev, err := e.dp.ReadEvent()
		switch {
		case errors.Is(err, ErrClosed):
			return
		case err != nil:
			e.log.Warn("reading datapath events", "err", err)
			continue
		case ev.Found:
			e.notify(ev.Pair, notice{ev: ev})
		}
	}
}

// sweep removes pairs in TIME_WAIT for Options.TimeWait, reset or idle for
// Options.IdleTimeout, every sweepEvery until Close.
func (e *Engine) sweep() {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		removed, err := e.dp.Sweep(Now())
		if err != nil && !errors.Is(err, ErrClosed) {
			e.log.Warn("sweeping the pair table", "err", err)
		}
		for _, r := range removed {
			e.release(r.Pair)
			e.notify(r.Pair, notice{removed: r.Reason})
		}
	}
}

// Splicing an idle pair into the datapath: hold, freeze both sockets, compute the translation, deliver owed bytes, publish, and close the sockets or leave them frozen for an unsplice.

package ip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

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
		return engine.Result{}, engine.Fallback(Name, "%v", err)
	}
	if err := e.load(); err != nil {
		return engine.Result{}, engine.Fallback(Name, "%v", err)
	}
	if err := queuedPastBoundary(p, opts); err != nil {
		return engine.Result{}, engine.Fallback(Name, "%v", err)
	}
	// On the caller's goroutine: a goroutine of its own cost two
	// handoffs per splice, each a wakeup that a loaded machine stretches
	// to tens of microseconds. The stack it needs stays within 8 KiB
	// (splicing), which a goroutine that did little before has not grown
	// past: copying it to a larger one costs more than all but the
	// slowest steps of a splice.
	sp, err := e.splice(p, opts)
	if err != nil {
		return engine.Result{}, err
	}
	return e.afterSplice(ctx, p, sp, opts), nil
}

// afterSplice hands a spliced pair to its follower. Apart from Splice,
// whose frame stays small for the splice's steps, which are deeper.
func (e *Engine) afterSplice(ctx context.Context, p *engine.Pair, sp *spliced, opts engine.Options) engine.Result {
	// Both sockets are in repair mode: closing them sends nothing, and a
	// splice that cannot give the pair back needs them no more, so the
	// forwarder may close them now. One that may unsplice needs them,
	// frozen, to rebuild them.
	if sp.fz == nil && opts.OnDetached != nil {
		opts.OnDetached()
	}
	// Nothing left for the caller to hold: the engine follows the pair
	// with all the others (detached.go), and the caller's goroutine ends.
	if sp.fz == nil && sp.drain == nil && opts.OnEnd != nil {
		return e.detach(ctx, e.newFollower(p, *sp), *sp, opts)
	}
	return e.follow(ctx, p, *sp, opts)
}

// spliced is a pair splice put in the datapath.
type spliced struct {
	a    datapath.Tuple
	ch   <-chan notice
	spec datapath.PairSpec // as published
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

// splicing is one splice under way: what its steps (hold, read,
// publish, settle) learn and pass on. The steps are methods of their
// own, each with its frame, rather than one function: Go sizes a frame
// for every value the function holds and every call's arguments, and
// one function holding them all, called from Splice, put the deepest of
// the steps past 8 KiB of stack, which every splice then copied to a new
// one of 16 KiB (tens of microseconds, more than any one of its system
// calls).
type splicing struct {
	e          *Engine
	p          *engine.Pair
	opts       *engine.Options
	client, up *net.TCPConn
	spec       datapath.PairSpec // as inserted: both directions held
	ch         <-chan notice
	// sa and sb are the frozen sockets' states (client, upstream); reading,
	// w and q what the final reading and the queues add.
	sa, sb  tcprepair.State
	reading programReading
	w       [2]tcprepair.Window
	q       owedQueues
	fz      *frozen
	pub     published
	t       splicingTimes
}

// splicingTimes are a splice's clock readings: since and held when the
// pair was held (the datapath's clock, which tells its events from an
// earlier splice's, and the wall clock), tGrace, tClocks and tPub how
// long the steps took, for the debug log.
type splicingTimes struct {
	since                 time.Duration
	held                  time.Time
	tGrace, tClocks, tPub time.Duration
}

// splicings recycles the splicing records: one on the stack would put
// its kilobyte under every step's frame.
var splicings = sync.Pool{New: func() any { return new(splicing) }}

// recycle clears s and puts it back in splicings.
func (s *splicing) recycle() {
	*s = splicing{}
	splicings.Put(s)
}

// splice puts the pair in the datapath, its sockets frozen (Splice closes
// them); it returns the pair's A tuple, the channel its news arrives on
// and the bytes still to deliver, or a *engine.FallbackError.
func (e *Engine) splice(p *engine.Pair, opts engine.Options) (*spliced, error) {
	s := splicings.Get().(*splicing) // zero: put back cleared
	defer s.recycle()
	s.e, s.p, s.opts, s.client, s.up = e, p, &opts, p.Client, p.Upstream()
	if err := s.hold(); err != nil {
		return nil, err
	}
	if err := s.read(); err != nil {
		return nil, s.undo("%v", err)
	}
	if err := s.publish(); err != nil {
		return nil, s.undo("%v", err)
	}
	// The program forwards the pair from here on: what follows (the owed
	// bytes' delivery, the announcements, the port's reservation) goes on
	// beside it.
	if opts.OnSpliced != nil {
		opts.OnSpliced()
	}
	return s.settle(), nil
}

// hold puts the pair in the datapath with both directions held.
func (s *splicing) hold() error {
	e := s.e
	pa, err := e.locate(s.client)
	if err != nil {
		return engine.Fallback(Name, "client connection: %v", err)
	}
	pb, err := e.locate(s.up)
	if err != nil {
		return engine.Fallback(Name, "upstream connection: %v", err)
	}
	if err := e.attach(pa.Ifindex, pb.Ifindex); err != nil {
		return engine.Fallback(Name, "%v", err)
	}
	// Hold first: from here on no segment of either connection reaches
	// its socket, so what the frozen sockets report stays true. Nothing
	// is lost: the program keeps every segment (Keep) for publish to
	// deliver, or, if the splice falls back, for the sockets.
	hold := datapath.DirSpec{DirMode: datapath.DirMode{Mode: engine.Hold}}
	s.spec = datapath.PairSpec{
		A: datapath.Tuple{Src: pa.Remote, Dst: pa.Local}, B: datapath.Tuple{Src: pb.Remote, Dst: pb.Local},
		IfindexA: pa.Ifindex, IfindexB: pb.Ifindex, Up: hold, Down: hold, Keep: true,
	}
	s.ch = e.followed.register(s.spec.A)
	s.t.since = datapath.Now()
	s.t.held = time.Now()
	if err := e.dp.Insert(s.spec); err != nil {
		e.followed.unregister(s.spec.A)
		return engine.Fallback(Name, "%v", err)
	}
	if e.hook != nil {
		e.hook("held")
	}
	return nil
}

// undo gives a held pair back to its sockets, and returns the
// *engine.FallbackError that says why.
func (s *splicing) undo(format string, args ...any) error {
	e, spec := s.e, s.spec
	// The peers' clocks seen while held spare the next splice of
	// these connections the timestamp probe, whose answer Linux
	// allows once per 500 ms per socket.
	if st, err := e.dp.Lookup(spec.A); err == nil {
		e.clocks.cache.remember(spec, st)
	}
	// Hold again (publish may have written the modes; the program
	// keeps meanwhile), thaw before Delete, give the sockets every
	// segment the program kept, and then the program hands the next
	// ones to the stack: the peers see the splice as a delay.
	hold := datapath.DirMode{Mode: engine.Hold}
	errs := []error{e.dp.SetMode(spec.A, engine.Up, hold), e.dp.SetMode(spec.A, engine.Down, hold)}
	errs = append(errs, tcprepair.Thaw(s.client), tcprepair.Thaw(s.up))
	errs = append(errs, e.releaseToSockets(spec), e.dp.Delete(spec.A))
	e.followed.unregister(spec.A)
	if err := errors.Join(errs...); err != nil {
		e.log.Warn("undoing a splice that fell back", "pair", s.p.ID, "err", err)
	}
	e.log.Debug("fell back after holding the pair", "pair", s.p.ID, "held", time.Since(s.t.held), "reason", fmt.Sprintf(format, args...))
	return engine.Fallback(Name, format, args...)
}

// read freezes the held pair's sockets and reads them once nothing more
// can reach them: their states, the peers' clocks, the windows and the
// bytes the forwarder owes each peer. An error means falling back.
func (s *splicing) read() error {
	if err := s.freeze(); err != nil {
		return err
	}
	return s.queues()
}

// freeze freezes the sockets and reads their states and the peers'
// clocks, final once the grace period has ended.
func (s *splicing) freeze() error {
	e, client, up := s.e, s.client, s.up
	// A peer whose connection was unspliced before may have its clock
	// remembered from then (unsplice.go).
	known := e.clocks.cache.recall(s.spec.A, s.spec.B)
	// Without the socket reader the peers' clocks come from a probe, whose
	// answers travel while the grace period runs: freeze and probe first,
	// read again after. With it, the sockets freeze while the grace
	// period runs, and the reader's one run after it is final and usually
	// needs no probe.
	early := e.clocks.reader == nil || e.clocks.probe == [2]bool{true, true}
	var probed time.Time
	var err error
	tGrace0 := time.Now()
	grace := e.devices.startGrace()
	if early {
		probed, err = s.freezeAndProbe(grace, known)
	} else {
		s.sa, s.sb, err = freezeInfoPair(client, up, s.spec.IfindexA, s.spec.IfindexB)
		grace()
		if err == nil {
			s.reading, err = e.readFinal(client, up, &s.sa, &s.sb, &known)
		}
	}
	s.t.tGrace = time.Since(tGrace0)
	if err != nil {
		return err
	}
	if s.sa.Params.Timestamps {
		if err := s.clocks(early, probed, known); err != nil {
			return err
		}
	}
	s.t.tClocks = time.Since(tGrace0) - s.t.tGrace
	return nil
}

// freezeAndProbe is freeze without the socket reader: the sockets
// freeze and the peers are probed before the grace period ends, then the
// sockets are read again. It returns when the probes were sent.
func (s *splicing) freezeAndProbe(grace func(), known knownClocks) (probed time.Time, err error) {
	if s.sa, s.sb, err = freezePair(s.client, s.up, s.spec.IfindexA, s.spec.IfindexB); err != nil {
		return probed, err
	}
	if s.sa.Params.Timestamps {
		probed = time.Now()
		if err := s.e.probeClocks(s.client, s.up, s.sa, s.sb, known); err != nil {
			return probed, err
		}
	}
	grace()
	// Segments that were already past tc when the pair was inserted
	// have reached the sockets by now: this reading is final.
	s.sa, s.sb, err = rereadPair(s.client, s.up, s.sa, s.sb)
	return probed, err
}

// queues reads the frozen sockets' windows and the bytes they owe their
// peers, and what an unsplice needs of them.
func (s *splicing) queues() error {
	e, client, up := s.e, s.client, s.up
	var err error
	if s.w, err = readWindows(client, up, s.reading.win); err != nil {
		return err
	}
	// Before the queues are copied: a refused splice needs none of them.
	if err := windowsFit(*s.opts, s.sa, s.sb, s.w); err != nil {
		e.counts.windowRefused.Add(1)
		return err
	}
	if s.q, err = readOwed(client, up, s.sa, s.sb, s.w); err != nil {
		return err
	}
	if unsplicing(*s.opts) {
		if s.fz, err = freezeForUnsplice(client, up, s.sa, s.sb); err != nil {
			return err
		}
	}
	return nil
}

// clocks learns the peers' timestamp clocks into the sockets' states,
// probing the peers whose clocks the reading did not give.
func (s *splicing) clocks(early bool, probed time.Time, known knownClocks) error {
	e, sa, sb := s.e, &s.sa, &s.sb
	pa, pb := sa.Params, sb.Params
	if !early && (!known.haveClient || !known.haveServer) {
		probed = time.Now()
		if err := e.probeClocks(s.client, s.up, *sa, *sb, known); err != nil {
			return err
		}
	}
	if err := e.learnClocks(s.client, s.up, *sa, *sb, &pa, &pb, probed, 4*max(sa.RTT, sb.RTT)+learnTimeout, known, s.reading.own); err != nil {
		return err
	}
	sa.Params, sb.Params = pa, pb
	return nil
}

// publish writes the pair's translation, from which on the datapath
// forwards it.
func (s *splicing) publish() error {
	e := s.e
	tPub0 := time.Now()
	err := e.publish(s.spec.A, &s.sa, &s.sb, s.opts, &s.pub)
	s.t.tPub = time.Since(tPub0)
	if err != nil {
		return err
	}
	// What was kept is in the spec and the drain now; what the program
	// keeps from here on (past a boundary) is the unsplice's.
	e.dp.ForgetKept(s.spec.A, engine.Up)
	e.dp.ForgetKept(s.spec.A, engine.Down)
	return nil
}

// settle does what a published pair needs beside the datapath: the
// debug record, the owed bytes' delivery, the peers' announcements and
// the port's reservation; and returns the pair as spliced.
func (s *splicing) settle() *spliced {
	e, p, pub, sa, sb := s.e, s.p, &s.pub, s.sa, s.sb
	// Asked first: the record's 18 arguments are boxed whether or not a
	// handler takes it, a dozen allocations per splice.
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("published", "pair", p.ID, "held", time.Since(s.t.held), "grace", s.t.tGrace, "clocks", s.t.tClocks, "publish", s.t.tPub,
			"kept_up", len(pub.kept[engine.Up].data), "kept_down", len(pub.kept[engine.Down].data),
			"gap_up", pub.kept[engine.Up].gap, "gap_down", pub.kept[engine.Down].gap)
	}
	d, err := e.drainFor(*pub, sa, sb, s.q)
	if err != nil {
		// Published already: the pair is the datapath's, only the owed
		// bytes are lost (their senders have them acknowledged).
		e.log.Warn("delivering owed bytes", "pair", p.ID, "err", err)
	}
	if d != nil {
		d.start() // the owed bytes first, then the senders' news (drain.go)
	}
	e.announce(*pub, sa, sb, s.q)
	// The port stays busy while the pair is in the table (porthold.go).
	if err := e.ports.hold(s.spec, s.up); err != nil {
		e.log.Warn("holding the upstream socket's port", "pair", p.ID, "err", err)
	}
	sp := &spliced{a: s.spec.A, ch: s.ch, spec: pub.spec, fz: s.fz, since: s.t.since,
		unread:  [2]int64{int64(sa.InQ + len(pub.kept[engine.Up].data)), int64(sb.InQ + len(pub.kept[engine.Down].data))},
		seed:    [2]uint32{pub.spec.Up.SndNxt, pub.spec.Down.SndNxt},
		seedFIN: [2]bool{pub.spec.Up.FINSeen, pub.spec.Down.FINSeen}}
	if d != nil && len(d.dirs) > 0 {
		sp.drain = d
		e.counts.drainedPairs.Add(1)
		for _, o := range d.dirs {
			e.counts.drainedBytes.Add(int64(len(o.data)))
		}
	}
	return sp
}

// owedQueues is what the frozen sockets hold for their peers, read once
// the reading is final: per direction (by engine.Direction), the output
// socket's send queue followed by the input socket's receive queue (in a
// pooled buffer: freeOwed); and both sockets' windows (by side: 0
// client, 1 upstream).
type owedQueues struct {
	owed [2][]byte
	w    [2]tcprepair.Window
}

// readWindows reads the windows of two frozen sockets (by side: 0 client,
// 1 upstream), unless the final reading had them (win).
func readWindows(client, up *net.TCPConn, win *[2]tcprepair.Window) ([2]tcprepair.Window, error) {
	if win != nil {
		return *win, nil
	}
	var w [2]tcprepair.Window
	for side, c := range []*net.TCPConn{client, up} {
		var err error
		if w[side], err = tcprepair.ReadWindow(c); err != nil {
			return w, err
		}
	}
	return w, nil
}

// readOwed reads the owed bytes of two frozen sockets, whose windows are w.
func readOwed(client, up *net.TCPConn, sa, sb tcprepair.State, w [2]tcprepair.Window) (owedQueues, error) {
	q := owedQueues{w: w}
	for _, o := range []struct {
		dir       engine.Direction
		out, in   *net.TCPConn
		sOut, sIn tcprepair.State
	}{{engine.Up, up, client, sb, sa}, {engine.Down, client, up, sa, sb}} {
		buf := owedBuf(o.sOut.OutQ + o.sIn.InQ)
		buf, err := tcprepair.PeekQueue(o.out, tcprepair.SendQueue, o.sOut.OutQ, buf)
		if err != nil {
			return q, fmt.Errorf("read the %v send queue: %w", o.dir, err)
		}
		if q.owed[o.dir], err = tcprepair.PeekQueue(o.in, tcprepair.RecvQueue, o.sIn.InQ, buf); err != nil {
			return q, fmt.Errorf("read the %v receive queue: %w", o.dir, err)
		}
	}
	return q, nil
}

// specFor returns the spec that splices two frozen sockets, with offsets
// that leave room for the bytes the forwarder owes each receiver: toward
// the server, the upstream socket's send queue, then the client socket's
// receive queue, then what the program kept of the client's segments
// while the pair was held (kept, by direction: as if it had reached the
// client socket's receive queue); toward the client, the mirror.
func specFor(sa, sb *tcprepair.State, kept *[2]keptRun) (datapath.PairSpec, error) {
	pa, pb := sa.Params, sb.Params
	ku, kd := kept[engine.Up], kept[engine.Down]
	// Kept bytes and FIN count as received: rcv_nxt moves past them.
	pa.RcvNxt += uint32(len(ku.data)) + b2u(ku.fin)
	pb.RcvNxt += uint32(len(kd.data)) + b2u(kd.fin)
	// A FIN received and acknowledged is owed too, after the bytes.
	pa.WriteSeq += uint32(sb.InQ+len(kd.data)) + b2u(sb.FINReceived || kd.fin)
	pb.WriteSeq += uint32(sa.InQ+len(ku.data)) + b2u(sa.FINReceived || ku.fin)
	spec, err := datapath.NewPairSpec(pa, pb)
	if err != nil {
		return spec, err
	}
	spec.Up.FINSeen, spec.Down.FINSeen = sa.FINReceived || ku.fin, sb.FINReceived || kd.fin
	// The senders' acks the program kept are newer than the sockets'.
	if ku.hasAck {
		spec.Up.AckHi = ku.ack
	}
	if kd.hasAck {
		spec.Down.AckHi = kd.ack
	}
	upOwed := sb.OutQ + sa.InQ + len(ku.data) + int(b2u(sa.FINReceived || ku.fin))
	downOwed := sa.OutQ + sb.InQ + len(kd.data) + int(b2u(sb.FINReceived || kd.fin))
	// The datapath drops acks lagging more than a window's span behind
	// what was sent; the receiver acknowledges the owed bytes from below.
	if lim := guardSpan(max(spec.Down.InShift, spec.Down.OutShift)); upOwed >= lim {
		return spec, fmt.Errorf("%d bytes owed to the server, more than the ack guard's span of %d", upOwed, lim)
	}
	if lim := guardSpan(max(spec.Up.InShift, spec.Up.OutShift)); downOwed >= lim {
		return spec, fmt.Errorf("%d bytes owed to the client, more than the ack guard's span of %d", downOwed, lim)
	}
	return spec, nil
}

// drainFor returns the drainer that delivers the owed bytes of a
// published pair, or nil when nothing is owed.
func (e *Engine) drainFor(pub published, sa, sb tcprepair.State, q owedQueues) (*drainer, error) {
	d := &drainer{dp: e.dp, in: e.inject, a: pub.spec.A, spec: pub.spec}
	for _, o := range []struct {
		dir       engine.Direction
		outSide   int
		sOut, sIn tcprepair.State
	}{{engine.Up, 1, sb, sa}, {engine.Down, 0, sa, sb}} {
		k := pub.kept[o.dir]
		data := append(q.owed[o.dir], k.data...)
		fin := o.sIn.FINReceived || k.fin
		if len(data) == 0 && !fin {
			freeOwed(data)
			continue
		}
		// The output socket has received what the other direction's
		// kept segments brought, as far as the peer is told.
		sOut := o.sOut
		sOut.Params.RcvNxt = pub.spec.Dir(1 - o.dir).SndNxt
		ow := owedDir(o.dir, sOut, q.w[o.outSide], data, fin)
		// The sender's side, for relayWindow.
		pin, w := o.sIn.Params, q.w[1-o.outSide]
		ow.sender.src, ow.sender.dst, ow.sender.scale = pin.Local, pin.Remote, pin.RcvWScale
		ow.sender.ack, ow.sender.seq0, ow.sender.told = pub.spec.Dir(o.dir).SndNxt, o.sIn.SndNxt, w.RcvWup+w.RcvWnd
		d.dirs = append(d.dirs, ow)
	}
	if len(d.dirs) == 0 {
		return nil, nil
	}
	fd, err := e.inject.open(sa.Params.Local.Addr().Is6(), e.home.do)
	if err != nil {
		return nil, err
	}
	d.fd = fd
	return d, nil
}

// owedDir is one direction's owed bytes, delivered on the output
// connection from its socket's snd_una on.
func owedDir(dir engine.Direction, sOut tcprepair.State, w tcprepair.Window, data []byte, fin bool) *owed {
	po := sOut.Params
	var win uint64
	if edge := w.RcvWup + w.RcvWnd; seqLess(po.RcvNxt, edge) {
		win = uint64(edge-po.RcvNxt) >> po.RcvWScale
	}
	mss := sOut.SndMSS
	if mss <= 0 {
		mss = 536
	}
	return &owed{
		dir:   dir,
		fin:   fin,
		src:   po.Local,
		dst:   po.Remote,
		start: po.SndUna,
		data:  data,
		mss:   mss,
		ts:    po.Timestamps,
		first: outputView{edge: po.SndUna + w.SndWnd, ack: po.RcvNxt, win: uint16(min(win, 0xffff))},
		// 4 srtt, within the drain's bounds: a socket that waited on a
		// closed window may report a smoothed RTT of seconds.
		tx:     sendState{rto0: min(max(drainMinRTO, 4*sOut.RTT), drainMaxRTO)},
		logged: drainCounts{bytes: len(data)},
	}
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
func unspliceable(a, b tcprepair.State) string {
	switch {
	case !a.Established || !b.Established:
		return fmt.Sprintf("a connection is not established (the forwarder sent a FIN, or is not connected): client side state %d, upstream side %d", a.TCPState, b.TCPState)
	case a.Params.Timestamps && a.UsecTS != b.UsecTS:
		return "timestamps tick in microseconds on one connection only"
	}
	return ""
}

// freezePair freezes both sockets and reads them, and says why they
// cannot be spliced if they cannot.
func freezePair(client, up *net.TCPConn, ifindexA, ifindexB int) (sa, sb tcprepair.State, err error) {
	if sa, sb, err = freezeWith(tcprepair.Freeze, client, up, ifindexA, ifindexB); err != nil {
		return sa, sb, err
	}
	return sa, sb, datapath.CanTranslate(sa.Params, sb.Params)
}

// freezeInfoPair freezes both sockets and reads their TCP_INFO (the
// queues are still to be read), and says why they cannot be spliced if
// that shows already.
func freezeInfoPair(client, up *net.TCPConn, ifindexA, ifindexB int) (sa, sb tcprepair.State, err error) {
	return freezeWith(tcprepair.FreezeInfo, client, up, ifindexA, ifindexB)
}

func freezeWith(freeze func(*net.TCPConn) (tcprepair.State, error), client, up *net.TCPConn, ifindexA, ifindexB int) (sa, sb tcprepair.State, err error) {
	if sa, err = freeze(client); err != nil {
		return sa, sb, fmt.Errorf("freeze the client connection: %w", err)
	}
	if sb, err = freeze(up); err != nil {
		return sa, sb, fmt.Errorf("freeze the upstream connection: %w", err)
	}
	sa.Params.Ifindex, sb.Params.Ifindex = ifindexA, ifindexB
	if reason := unspliceable(sa, sb); reason != "" {
		return sa, sb, errors.New(reason)
	}
	return sa, sb, nil
}

// locate returns c's addresses and the device toward its peer, after
// checking that the datapath can see c's packets at all: c is in the
// engine's namespace.
func (e *Engine) locate(c *net.TCPConn) (tcprepair.ConnParams, error) {
	var cp tcprepair.ConnParams
	if c == nil {
		return cp, errors.New("no connection")
	}
	local, remote, err := tcprepair.Addrs(c)
	if err != nil {
		return cp, err
	}
	// Its protocol is not asked: freezing refuses an MPTCP socket
	// (tcprepair.ErrMPTCP), which costs such a pair, rare behind Go's
	// listeners (they hand a plain TCP client a TCP socket), an insert
	// and a delete; every other splice saves a system call per socket.
	if err := e.home.owns(c); err != nil {
		return cp, err
	}
	ifindex, err := e.home.deviceTo(remote.Addr())
	if err != nil {
		return cp, err
	}
	return tcprepair.ConnParams{Local: local, Remote: remote, Ifindex: ifindex}, nil
}

// Splicing an idle pair into the datapath: hold, freeze both sockets, compute the translation, deliver owed bytes, publish, and close the sockets or leave them frozen for an unsplice.

package ip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sys/unix"

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
	// to tens of microseconds. The stack it grows (16-32 KiB) goes with
	// the caller's goroutine, which ends at once for a pair the engine
	// detaches; one that may unsplice grows it again when it does, and
	// the garbage collector shrinks an idle one.
	sp, err := e.splice(p, opts)
	if err != nil {
		return engine.Result{}, err
	}
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
		return e.detach(ctx, e.newFollower(p, sp), sp, opts), nil
	}
	return e.follow(ctx, p, sp, opts), nil
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

// splice puts the pair in the datapath, its sockets frozen (Splice closes
// them); it returns the pair's A tuple, the channel its news arrives on
// and the bytes still to deliver, or a *engine.FallbackError.
func (e *Engine) splice(p *engine.Pair, opts engine.Options) (spliced, error) {
	client, up := p.Client, p.Upstream()
	pa, err := e.locate(client)
	if err != nil {
		return spliced{}, engine.Fallback(Name, "client connection: %v", err)
	}
	pb, err := e.locate(up)
	if err != nil {
		return spliced{}, engine.Fallback(Name, "upstream connection: %v", err)
	}
	if err := e.attach(pa.Ifindex, pb.Ifindex); err != nil {
		return spliced{}, engine.Fallback(Name, "%v", err)
	}

	// Hold first: from here on no segment of either connection reaches
	// its socket, so what the frozen sockets report stays true. Nothing
	// is lost: the program keeps every segment (Keep) for publish to
	// deliver, or, if the splice falls back, for the sockets.
	hold := datapath.DirSpec{DirMode: datapath.DirMode{Mode: engine.Hold}}
	spec := datapath.PairSpec{
		A: datapath.Tuple{Src: pa.Remote, Dst: pa.Local}, B: datapath.Tuple{Src: pb.Remote, Dst: pb.Local},
		IfindexA: pa.Ifindex, IfindexB: pb.Ifindex, Up: hold, Down: hold, Keep: true,
	}
	ch := e.followed.register(spec.A)
	since := datapath.Now()
	held := time.Now()
	if err := e.dp.Insert(spec); err != nil {
		e.followed.unregister(spec.A)
		return spliced{}, engine.Fallback(Name, "%v", err)
	}
	if e.hook != nil {
		e.hook("held")
	}
	undo := func(format string, args ...any) (spliced, error) {
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
		errs := []error{e.dp.SetMode(spec.A, engine.Up, hold.DirMode), e.dp.SetMode(spec.A, engine.Down, hold.DirMode)}
		errs = append(errs, tcprepair.Thaw(client), tcprepair.Thaw(up))
		errs = append(errs, e.releaseToSockets(spec), e.dp.Delete(spec.A))
		e.followed.unregister(spec.A)
		if err := errors.Join(errs...); err != nil {
			e.log.Warn("undoing a splice that fell back", "pair", p.ID, "err", err)
		}
		e.log.Debug("fell back after holding the pair", "pair", p.ID, "held", time.Since(held), "reason", fmt.Sprintf(format, args...))
		return spliced{}, engine.Fallback(Name, format, args...)
	}
	// A peer whose connection was unspliced before may have its clock
	// remembered from then (unsplice.go).
	known := e.clocks.cache.recall(spec.A, spec.B)
	// Without the socket reader the peers' clocks come from a probe, whose
	// answers travel while the grace period runs: freeze and probe first,
	// read again after. With it, the sockets freeze while the grace
	// period runs, and the reader's one run after it is final and usually
	// needs no probe.
	early := e.clocks.reader == nil || e.clocks.probe == [2]bool{true, true}
	var sa, sb tcprepair.State
	var read programReading
	var probed time.Time
	tGrace0 := time.Now()
	grace := e.devices.startGrace()
	if early {
		if sa, sb, err = freezePair(client, up, pa.Ifindex, pb.Ifindex); err != nil {
			return undo("%v", err)
		}
		if sa.Params.Timestamps {
			probed = time.Now()
			if err := e.probeClocks(client, up, sa, sb, known); err != nil {
				return undo("%v", err)
			}
		}
		grace()
		// Segments that were already past tc when the pair was inserted
		// have reached the sockets by now: this reading is final.
		sa, sb, err = rereadPair(client, up, sa, sb)
	} else {
		sa, sb, err = freezeInfoPair(client, up, pa.Ifindex, pb.Ifindex)
		grace()
		if err == nil {
			sa, sb, read, known, err = e.readFinal(client, up, sa, sb, known)
		}
	}
	tGrace := time.Since(tGrace0)
	if err != nil {
		return undo("%v", err)
	}
	pa, pb = sa.Params, sb.Params
	if pa.Timestamps {
		if !early && (!known.haveClient || !known.haveServer) {
			probed = time.Now()
			if err := e.probeClocks(client, up, sa, sb, known); err != nil {
				return undo("%v", err)
			}
		}
		if err := e.learnClocks(client, up, sa, sb, &pa, &pb, probed, 4*max(sa.RTT, sb.RTT)+learnTimeout, known, read.own); err != nil {
			return undo("%v", err)
		}
	}
	sa.Params, sb.Params = pa, pb
	tClocks := time.Since(tGrace0) - tGrace
	w, err := readWindows(client, up, read.win)
	if err != nil {
		return undo("%v", err)
	}
	// Before the queues are copied: a refused splice needs none of them.
	if err := windowsFit(opts, sa, sb, w); err != nil {
		e.counts.windowRefused.Add(1)
		return undo("%v", err)
	}
	q, err := readOwed(client, up, sa, sb, w)
	if err != nil {
		return undo("%v", err)
	}
	var fz *frozen
	if unsplicing(opts) {
		if fz, err = freezeForUnsplice(client, up, sa, sb); err != nil {
			return undo("%v", err)
		}
	}
	tPub0 := time.Now()
	pub, err := e.publish(spec.A, sa, sb, opts)
	tPub := time.Since(tPub0)
	if err != nil {
		return undo("%v", err)
	}
	// Asked first: the record's 18 arguments are boxed whether or not a
	// handler takes it, a dozen allocations per splice.
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		e.log.Debug("published", "pair", p.ID, "held", time.Since(held), "grace", tGrace, "clocks", tClocks, "publish", tPub,
			"kept_up", len(pub.kept[engine.Up].data), "kept_down", len(pub.kept[engine.Down].data),
			"gap_up", pub.kept[engine.Up].gap, "gap_down", pub.kept[engine.Down].gap)
	}
	// What was kept is in the spec and the drain now; what the program
	// keeps from here on (past a boundary) is the unsplice's.
	e.dp.ForgetKept(spec.A, engine.Up)
	e.dp.ForgetKept(spec.A, engine.Down)
	// The program forwards the pair from here on: what follows (the owed
	// bytes' delivery, the announcements, the port's reservation) goes on
	// beside it.
	if opts.OnSpliced != nil {
		opts.OnSpliced()
	}
	d, err := e.drainFor(pub, sa, sb, q)
	if err != nil {
		// Published already: the pair is the datapath's, only the owed
		// bytes are lost (their senders have them acknowledged).
		e.log.Warn("delivering owed bytes", "pair", p.ID, "err", err)
	}
	if d != nil {
		d.start() // the owed bytes first, then the senders' news (drain.go)
	}
	e.announce(pub, sa, sb, q)
	// The port stays busy while the pair is in the table (porthold.go).
	if err := e.ports.hold(spec, up); err != nil {
		e.log.Warn("holding the upstream socket's port", "pair", p.ID, "err", err)
	}
	sp := spliced{a: spec.A, ch: ch, spec: pub.spec, fz: fz, since: since,
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
	return sp, nil
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
func specFor(sa, sb tcprepair.State, kept [2]keptRun) (datapath.PairSpec, error) {
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
// checking that the datapath can see c's packets at all.
func (e *Engine) locate(c *net.TCPConn) (tcprepair.ConnParams, error) {
	var cp tcprepair.ConnParams
	if c == nil {
		return cp, errors.New("no connection")
	}
	local, remote, err := tcprepair.Addrs(c)
	if err != nil {
		return cp, err
	}
	proto, cookie, err := tcprepair.Identity(c, e.home.cookie != 0)
	if err != nil {
		return cp, err
	}
	if proto != unix.IPPROTO_TCP {
		return cp, errors.New("an MPTCP socket: its subflows' sequence numbers are not the socket's")
	}
	if err := e.home.owns(c, cookie); err != nil {
		return cp, err
	}
	ifindex, err := e.home.deviceTo(remote.Addr())
	if err != nil {
		return cp, err
	}
	return tcprepair.ConnParams{Local: local, Remote: remote, Ifindex: ifindex}, nil
}

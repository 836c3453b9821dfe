// Unsplicing: taking a pair out of the datapath at a byte limit, at data in a watched direction or when a timer fires, and rebuilding the forwarder's two frozen sockets from the state the datapath tracked, so the proxy carries on in control mode.

package ip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

const (
	// quietTimeout bounds the wait for both receivers to acknowledge
	// everything the datapath forwarded them. A delayed ACK takes up to
	// 200 ms; a lost one is recovered by the sender's retransmission,
	// which a watch forwards, and the receiver's new ACK. Each loss of
	// the same retransmission doubles the sender's timeout (200 ms,
	// 400, 800, 1.6 s, 3.2 s): 15 s outlasts four in a row, where 2 s
	// reset pairs on links losing 5% both ways (TestLabHTTPReverseIPRandom
	// at 5%); TCP itself keeps trying for minutes.
	quietTimeout = 15 * time.Second
	// remainderTimeout bounds the copy, in control mode, of a limited
	// direction's last bytes when the segment holding them crossed the
	// limit and was not forwarded.
	remainderTimeout = 10 * time.Second
	// maxLimit bounds byte limits: LimitSeq must stay within 2^31 of
	// SndNxt for the program's sequence comparisons.
	maxLimit = 1 << 30
)

// unsplicer watches a spliced pair for the conditions that give it back
// in control mode, and does it.
type unsplicer struct {
	e    *Engine
	p    *engine.Pair
	opts engine.Options
	spec datapath.PairSpec
	fz   *frozen
	// timer fires after opts.For; nil without.
	timer *time.Timer
	// last is the pair's latest tracked state, for resetting its peers.
	last datapath.PairStats
	// rcv is, by side (0 client, 1 upstream), the rebuilt socket's
	// rcv_nxt: past the kept bytes put into its receive queue.
	rcv [2]uint32
	// kept counts, by direction, the kept bytes put into the rebuilt
	// sockets, for the log.
	kept [2]int
	// full, by side: the rebuilt socket's receive queue took no more
	// kept bytes (its SO_RCVBUF); the rest is left to the sender's
	// retransmission. left counts those bytes, for the log.
	full [2]bool
	left [2]int
	// holes: filling a receiver's hole from kept bytes (unsplicehole.go).
	holes holes
	// start is when the splice began; drops0 a reading of the program's
	// drop counters taken at most a second before, for the report of an
	// unsplice that times out (stallReport).
	start  time.Time
	drops0 *dropsReading
}

func newUnsplicer(e *Engine, p *engine.Pair, sp spliced, opts engine.Options) *unsplicer {
	u := &unsplicer{e: e, p: p, opts: opts, spec: sp.spec, fz: sp.fz, start: time.Now(), drops0: e.recentDrops()}
	if opts.For > 0 {
		u.timer = time.NewTimer(opts.For)
	}
	return u
}

// timerC is the For timer's channel, nil (never ready) without one.
func (u *unsplicer) timerC() <-chan time.Time {
	if u == nil || u.timer == nil {
		return nil
	}
	return u.timer.C
}

func (u *unsplicer) stop() {
	if u != nil && u.timer != nil {
		u.timer.Stop()
	}
}

// plain turns the splice into one that runs to its end, once a FIN was
// forwarded (a sender closed before its limit, or while a timer ran): a
// half-closed connection cannot be rebuilt. Every direction forwards, so
// the other side's FIN passes too and the pair reaches TIME_WAIT; the
// splice then ends with EndEOF. It returns nil, the unsplicer's new value.
func (u *unsplicer) plain(a datapath.Tuple) *unsplicer {
	u.stop()
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if err := u.e.dp.SetMode(a, d, datapath.DirMode{Mode: engine.Forward}); err != nil {
			u.e.log.Warn("forwarding a half-closed pair to its end", "pair", u.p.ID, "err", err)
		}
	}
	u.e.log.Debug("a FIN was forwarded: the pair runs to its end", "pair", u.p.ID)
	return nil
}

// onEvent records kept data and reports whether ev ends the splice, with
// how and in which direction.
func (u *unsplicer) onEvent(ev datapath.Event) (engine.End, engine.Direction, bool) {
	d := ev.Dir
	switch ev.Kind {
	case datapath.EventLimit:
		if u.opts.Dir(d).Mode == engine.Forward && u.opts.Dir(d).Limit > 0 {
			return engine.EndLimit, d, true
		}
	case datapath.EventWatch:
		if u.opts.Dir(d).Mode == engine.Watch {
			return engine.EndData, d, true
		}
	}
	return 0, 0, false
}

// onStats catches a limit or watch whose event was lost.
func (u *unsplicer) onStats(st datapath.PairStats) (engine.End, engine.Direction, bool) {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o, ds := u.opts.Dir(d), st.Dir(d)
		switch {
		case o.Mode == engine.Forward && o.Limit > 0 && ds.LimitReached:
			return engine.EndLimit, d, true
		case o.Mode == engine.Watch && ds.Watched:
			return engine.EndData, d, true
		}
	}
	return 0, 0, false
}

// unspliceError is a failure after which the pair can only be reset (in
// or out of the table), as opposed to a pair that ended on its own.
type unspliceError struct{ reason string }

func (e *unspliceError) Error() string { return e.reason }

func failf(format string, args ...any) error {
	return &unspliceError{fmt.Sprintf(format, args...)}
}

// errHalfClosed: a FIN was forwarded before the watch took hold (a peer
// closed as a timer fired). A half-closed connection cannot be rebuilt,
// so the pair runs to its end, as after a FIN forwarded earlier (plain).
var errHalfClosed = errors.New("a FIN was forwarded while unsplicing")

// unsplice gives the pair back in control mode; the follower f has its
// counters. end and dir say why (EndLimit, EndData or EndTimer). On a
// failure both peers are reset and the pair's sockets closed: the proxy
// gets EndError, never a connection that lost or repeated bytes. done is
// false when a FIN was forwarded meanwhile: the pair then forwards both
// ways again until its end (plain), and the caller follows it on without
// the unsplicer.
func (u *unsplicer) unsplice(f *follower, ch <-chan notice, end engine.End, dir engine.Direction) (res engine.Result, done bool) {
	start := time.Now()
	u.e.log.Debug("unsplicing", "pair", u.p.ID, "end", end, "dir", dir)
	st, err := u.quiesce(f, ch)
	if errors.Is(err, errHalfClosed) {
		u.plain(f.a)
		return engine.Result{}, false
	}
	if err == nil && u.e.hook != nil {
		u.e.hook("unsplicing")
	}
	if err == nil {
		f.refresh() // the counters, final: the pair leaves the table next
		err = u.rebuild(st, ch)
	}
	var ue *unspliceError
	switch {
	case errors.As(err, &ue):
		return u.fail(f, err), true
	case err != nil: // the pair ended on its own meanwhile (reset, removed)
		f.refresh()
		return f.gone(""), true
	}
	res = f.end(end, nil)
	res.Dir = dir
	u.e.counts.unsplices.done(time.Since(start))
	u.e.clocks.cache.remember(u.spec, u.last)
	if end == engine.EndLimit {
		if err := u.copyRemainder(&res); err != nil {
			res.End, res.Err = engine.EndError, err
		}
	}
	if u.e.log.Enabled(context.Background(), slog.LevelDebug) { // 16 arguments boxed otherwise
		u.e.log.Debug("unspliced", "pair", u.p.ID, "end", end, "dir", dir, "took", time.Since(start),
			"kept_up", u.kept[engine.Up], "kept_down", u.kept[engine.Down], "left_up", u.left[engine.Up], "left_down", u.left[engine.Down],
			"moved", res.Moved)
	}
	return res, true
}

// quiesce stops both directions' data (watch), waits until each receiver
// has acknowledged everything forwarded to it, and returns the pair's
// state, whose SndNxt no longer moves.
func (u *unsplicer) quiesce(f *follower, ch <-chan notice) (datapath.PairStats, error) {
	if u.e.hook != nil {
		u.e.hook("quiescing")
	}
	a, dp := f.a, f.dp
	st, err := dp.Lookup(a)
	if err != nil {
		return st, err
	}
	inFlight := false
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		ds := st.Dir(d)
		if ds.Mode != engine.Forward {
			continue
		}
		// A direction at its limit forwards nothing new; any other
		// forwarding direction may have a segment inside the program.
		inFlight = inFlight || !(ds.Limited && ds.SndNxt == ds.LimitSeq)
		if err := dp.SetMode(a, d, datapath.DirMode{Mode: engine.Watch}); err != nil {
			return st, err
		}
	}
	if inFlight {
		// Every program run that still saw Forward has committed once
		// a grace period has passed; SndNxt is final.
		u.e.devices.graces.Wait()
	}
	// Both directions stay watched while the sockets are rebuilt: acks
	// pass, nothing advances SndNxt, and data that arrives meanwhile (the
	// next request, typically) is kept rather than lost.
	if st, err = u.waitQuiet(f, ch); err != nil {
		return st, err
	}
	return st, nil
}

// waitQuiet polls the pair until both receivers acknowledged all that was
// forwarded to them, consuming its notices meanwhile.
func (u *unsplicer) waitQuiet(f *follower, ch <-chan notice) (datapath.PairStats, error) {
	deadline := time.Now().Add(quietTimeout)
	wait := 50 * time.Microsecond
	for {
		st, err := f.dp.Lookup(f.a)
		if err != nil {
			return st, err
		}
		u.last = st
		if st.Phase == datapath.PhaseClosed {
			return st, errors.New("reset while unsplicing")
		}
		if st.Up.FIN || st.Down.FIN {
			return st, errHalfClosed
		}
		if u.quiet(st) {
			return st, nil
		}
		now := time.Now()
		if now.After(deadline) {
			return st, failf("the receivers did not acknowledge everything within %v (up %d of %d, down %d of %d)%s", quietTimeout,
				u.ackOf(st, engine.Down), st.Up.SndNxt+u.spec.Up.SeqOff, u.ackOf(st, engine.Up), st.Down.SndNxt+u.spec.Down.SeqOff,
				u.stallReport(f, st))
		}
		u.fillHoles(st, now)
		select {
		case n := <-ch:
			if n.removed != "" {
				return st, errors.New("removed while unsplicing")
			}
			u.onEvent(n.ev)
		case <-time.After(wait):
			wait = min(2*wait, 2*time.Millisecond)
		}
	}
}

// ackOf is the highest ack the sender of direction d sent, kept
// segments included (the program tracks their acks: a request carries
// the ACK of the response before it).
func (u *unsplicer) ackOf(st datapath.PairStats, d engine.Direction) uint32 {
	return st.Dir(d).AckHi
}

// quiet: nothing forwarded in either direction is unacknowledged.
func (u *unsplicer) quiet(st datapath.PairStats) bool {
	return u.ackOf(st, engine.Down) == st.Up.SndNxt+u.spec.Up.SeqOff &&
		u.ackOf(st, engine.Up) == st.Down.SndNxt+u.spec.Down.SeqOff
}

// rebuild rebuilds both sockets from st, takes the pair out of the
// datapath and leaves repair mode.
func (u *unsplicer) rebuild(st datapath.PairStats, ch <-chan notice) error {
	conns := [2]*net.TCPConn{u.p.Client, u.p.Upstream()}
	var rs [2]tcprepair.Rebuild
	for side, c := range conns {
		r, err := u.rebuildOf(side, c, st)
		if err != nil {
			return failf("%v", err)
		}
		var queued int
		err = sockopt.WithFD(c, func(fd int) (err error) {
			queued, err = tcprepair.RebuildSock(fd, r)
			return err
		})
		if err != nil {
			return failf("rebuild the %s socket: %v", sideName(side), err)
		}
		u.received(side, r.RcvSeq, queued, len(r.Queued))
		rs[side] = r
	}
	if err := u.leaveTable(st, conns); err != nil {
		return err
	}
	// The RTT probe tells each peer what the window probe of leaving
	// repair mode would (the rebuilt socket's ack and window) and draws
	// the same immediate answer: sent, it makes the window probe a second
	// segment each way for nothing.
	probeFD := u.probeSocket(rs[0])
	for side, c := range conns {
		err := sockopt.WithFD(c, func(fd int) error {
			if err := tcprepair.LeaveRepair(fd, probeFD < 0 || rs[side].InFlight == 0); err != nil {
				return err
			}
			if u.fz.keepalive[side] {
				return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
			}
			return nil
		})
		if err != nil {
			// Out of the table already: resetting is all that is left.
			return failf("leave repair mode on the %s socket: %v", sideName(side), err)
		}
	}
	for side := range conns {
		u.probeRTT(side, probeFD, rs[side])
	}
	return nil
}

// leaveTable puts into the rebuilt sockets (still in repair mode) the
// bytes the program kept since they were read, releases each direction
// in one compare-and-swap with its count of kept segments (the program
// hands the next ones to the stack: to the rebuilt socket, after the kept
// ones), and takes the pair out of the table. Nothing is lost: a segment
// is either in the socket's queue or reaches the socket itself.
func (u *unsplicer) leaveTable(st datapath.PairStats, conns [2]*net.TCPConn) error {
	a := u.spec.A
	kch, err := u.e.dp.KeptChanged(a)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(publishTimeout)
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		side := int(d) // up is received by the client socket
		for {
			k, err := u.e.dp.Kept(a, d)
			if err != nil {
				return err
			}
			if run := runOf(k.Segs, u.rcv[side], 0, 0); len(run.data) > 0 && !u.full[side] {
				var queued int
				err := sockopt.WithFD(conns[side], func(fd int) (err error) {
					queued, err = tcprepair.FillRecvQueue(fd, run.data)
					return err
				})
				if err != nil {
					return failf("append kept bytes to the %s socket: %v", sideName(side), err)
				}
				u.received(side, u.rcv[side], queued, len(run.data))
			}
			n := int64(k.Done)
			if time.Now().After(deadline) {
				n = -1 // segments still unaccounted for are left to retransmission
			}
			_, ok, err := u.e.dp.Release(a, d, n)
			if err != nil {
				return failf("%v", err)
			}
			if ok {
				break
			}
			select {
			case <-kch:
			case <-time.After(keptPoll):
			}
		}
	}
	held, err := u.e.dp.Remove(a)
	if err != nil {
		return failf("%v", err)
	}
	u.e.ports.release(a)
	u.last = held
	if held.Up.SndNxt != st.Up.SndNxt || held.Down.SndNxt != st.Down.SndNxt {
		return failf("the pair moved while its sockets were rebuilt (up %d -> %d, down %d -> %d)",
			st.Up.SndNxt, held.Up.SndNxt, st.Down.SndNxt, held.Down.SndNxt)
	}
	return nil
}

// received records that the rebuilt socket of side took queued of the n
// kept bytes offered at seq from: its rcv_nxt moves past them. Fewer than
// n means its receive queue is full: the sender, which no receiver
// acknowledged them to, retransmits the rest.
func (u *unsplicer) received(side int, from uint32, queued, n int) {
	u.rcv[side] = from + uint32(queued)
	u.kept[side] += queued // side 0, the client socket, receives up (0)
	if queued < n {
		u.full[side] = true
		u.left[side] += n - queued
	}
}

func sideName(side int) string {
	if side == 0 {
		return "client"
	}
	return "upstream"
}

// rebuildOf is what socket side (0 client, 1 upstream) becomes: it
// receives direction in (up for the client socket) and sends out.
//
//	client socket: rcv_nxt = Up.SndNxt (+ kept bytes), snd = Down.SndNxt + Down.SeqOff
//	upstream:      rcv_nxt = Down.SndNxt (+ kept),     snd = Up.SndNxt + Up.SeqOff
//
// Its last byte sent goes back in flight (Rebuild.InFlight) for a first
// RTT sample: probeRTT.
func (u *unsplicer) rebuildOf(side int, c *net.TCPConn, st datapath.PairStats) (tcprepair.Rebuild, error) {
	in, out := engine.Up, engine.Down
	if side == 1 {
		in, out = engine.Down, engine.Up
	}
	s, w := u.fz.s[side], u.fz.w[side]
	ps := s.Params
	si, so := st.Dir(in), st.Dir(out)
	r := tcprepair.Rebuild{
		Local: ps.Local, Remote: ps.Remote,
		SndSeq: so.SndNxt + u.spec.Dir(out).SeqOff, RcvSeq: si.SndNxt, InFlight: 1,
		PeerMSS: ps.PeerMSS, WScale: ps.WScale, SndWScale: ps.SndWScale, RcvWScale: ps.RcvWScale,
		SACK: ps.SACK, Timestamps: ps.Timestamps,
		SndWnd: w.SndWnd, MaxWindow: w.MaxWindow, RcvWnd: max(w.RcvWnd, 1),
	}
	raw, fresh := si.Window, si.Packets > 0
	k, err := u.e.dp.Kept(u.spec.A, in)
	if err != nil {
		return r, err
	}
	// The bytes the program kept, from the first one not forwarded.
	r.Queued = runOf(k.Segs, si.SndNxt, 0, 0).data
	if n := len(k.Segs); n > 0 {
		raw, fresh = k.Segs[n-1].Window(), true
	}
	if fresh {
		// The peer's latest window, in its own scale.
		r.SndWnd = uint32(raw) << min(ps.SndWScale, 14)
	}
	if ps.Timestamps {
		clock, err := tcprepair.TSClock(c)
		if err != nil {
			return r, fmt.Errorf("TCP_TIMESTAMP of the %s socket: %w", sideName(side), err)
		}
		// PAWS at the peer: never below the last TSval the datapath sent
		// it in this socket's name.
		if so.TSLast != 0 {
			clock = seqMax(clock, so.TSLast+u.spec.Dir(out).TSOff+1)
		}
		r.TSClock = clock
	}
	return r, nil
}

// probeRTT sends the peer of a rebuilt socket a copy of the byte the
// socket holds in flight (Rebuild.InFlight), which the peer already has:
// a duplicate, which TCP answers at once, without the rate limit on
// answers to old bare ACKs. The answer acknowledges the byte, and the
// socket takes its first RTT sample from it: its retransmission timeout
// becomes the path's (Linux's minimum, 200 ms, on a LAN), not the 1 or 3 s
// a socket without a sample keeps. Lost, the socket retransmits the byte
// itself after that timeout, and the sample comes then.
//
// The probe's TSval is the clock the rebuild gave the socket
// (Rebuild.SetClock), which its own segments carry from then on, give or
// take the milliseconds since: at least every TSval the peer saw, as
// PAWS wants, without a TCP_TIMESTAMP read. The socket's RTT sample comes
// from the byte's send time, not from the echo of this TSval.
func (u *unsplicer) probeRTT(side, fd int, r tcprepair.Rebuild) {
	if r.InFlight == 0 || fd < 0 {
		return
	}
	f := segFields{ack: u.rcv[side], win: uint16(min(r.RcvWnd>>min(r.RcvWScale, 14), 0xffff)), ts: r.Timestamps}
	if r.Timestamps {
		in := engine.Up
		if side == 1 {
			in = engine.Down
		}
		f.tsVal, f.tsEcr = r.SetClock(), u.last.Dir(in).TSLast
	}
	var buf [60 + tsOptLen + 1]byte
	u.e.inject.send(fd, r.Remote.Addr(), buildSegment(buf[:], r.Local, r.Remote, r.SndSeq-1, f, []byte{0}))
}

// probeSocket returns the raw socket the RTT probes of a pair whose
// client side is r go out on, or -1 if it cannot be opened (the sockets
// then leave repair mode with their own window probes).
func (u *unsplicer) probeSocket(r tcprepair.Rebuild) int {
	fd, err := u.e.inject.open(r.Local.Addr().Is6(), u.e.home.do)
	if err != nil {
		u.e.log.Debug("RTT probe", "pair", u.p.ID, "err", err)
		return -1
	}
	return fd
}

// copyRemainder forwards, in control mode, what a limited direction still
// owes when the segment holding its limit crossed it and was not
// forwarded: the first bytes are already in the rebuilt source socket's
// receive queue (kept by the program), the rest arrives by
// retransmission. EndLimit then means exactly the limit, as the proxy
// expects.
func (u *unsplicer) copyRemainder(res *engine.Result) error {
	d := res.Dir
	rem := res.Remaining(u.opts, d)
	if rem <= 0 {
		return nil
	}
	src, dst := u.p.Src(d), u.p.Dst(d)
	src.SetReadDeadline(time.Now().Add(remainderTimeout))
	defer src.SetReadDeadline(time.Time{})
	n, err := io.CopyN(dst, src, rem)
	u.p.AddBytes(d, n)
	res.Moved[d] += n
	if err != nil {
		return fmt.Errorf("copy the last %d bytes of the %v limit after unsplicing: %w", rem, d, err)
	}
	return nil
}

// fail resets both peers of a pair that could not be unspliced safely,
// removes it and leaves the forwarder's sockets in repair mode (closing
// them then sends nothing), counting and logging it.
func (u *unsplicer) fail(f *follower, cause error) engine.Result {
	u.e.counts.unsplices.failed.Add(1)
	u.e.log.Warn("unsplicing failed: both peers reset", "pair", u.p.ID, "err", cause)
	if st, err := f.dp.Lookup(f.a); err == nil {
		u.last = st
	}
	f.dp.Delete(f.a)
	u.e.ports.release(f.a)
	// At the highest sequence numbers forwarded: a peer still missing
	// bytes answers with a challenge ACK, which the stack, with no socket
	// left for it, resets.
	u.e.resetPeers(u.spec, u.last)
	// In repair mode the forwarder's close, when the pair ends, sends nothing.
	for _, c := range []*net.TCPConn{u.p.Client, u.p.Upstream()} {
		sockopt.WithFD(c, func(fd int) error {
			return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_ON)
		})
	}
	return f.end(engine.EndError, fmt.Errorf("engine ip: unsplicing failed, both peers reset: %w", cause))
}

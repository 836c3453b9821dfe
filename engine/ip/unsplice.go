// Unsplicing: taking a pair out of the datapath at a byte limit, at data in a watched direction or when a timer fires, and rebuilding the forwarder's two frozen sockets from the state the datapath tracked, so the proxy carries on in control mode.

package ip

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
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

// unsplicing reports whether a splice with opts may have to give the pair
// back in control mode: then the forwarder's sockets stay open, frozen,
// for the pair's whole time in the datapath.
func unsplicing(opts engine.Options) bool {
	return opts.HasLimits() || opts.HasWatch() || opts.For > 0 ||
		opts.Up.Mode == engine.Hold || opts.Down.Mode == engine.Hold
}

// supportsUnsplice refuses byte limits the datapath cannot express (one
// limit sequence number covers less than 2^31 bytes), and a direction
// forwarded to its end beside one held, watched or limited: the contract ends such a
// splice at the forwarded FIN (EndEOF) with the other direction in control
// mode, a half-closed pair whose sockets TCP_REPAIR cannot rebuild (it
// restores ESTABLISHED sockets only).
func supportsUnsplice(opts engine.Options) error {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o, other := opts.Dir(d), opts.Dir(d.Reverse())
		switch {
		case o.Mode == engine.Forward && o.Limit >= maxLimit:
			return fmt.Errorf("the %v limit of %d bytes is beyond what engine ip can stop at (%d)", d, o.Limit, maxLimit)
		case o.Mode == engine.Forward && o.Limit == 0 && (other.Mode != engine.Forward || other.Limit > 0):
			return fmt.Errorf("engine ip cannot end a splice at the %v FIN with the other direction in control mode (TCP_REPAIR rebuilds no half-closed socket)", d)
		}
	}
	return nil
}

// queuedPastBoundary checks, before anything is frozen, what
// prepareUnsplice checks after: a watched or held direction with bytes
// already unread on its source socket, or a limited one holding its whole
// limit there, cannot be spliced (the bytes only grow meanwhile), and
// saying so now spares the pair a hold and a grace period.
func queuedPastBoundary(p *engine.Pair, opts engine.Options) error {
	if !unsplicing(opts) {
		return nil
	}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o := opts.Dir(d)
		if o.Mode == engine.Forward && o.Limit == 0 {
			continue
		}
		inq, err := engine.Readable(p.Src(d))
		switch {
		case err != nil:
			return fmt.Errorf("SIOCINQ: %w", err)
		case o.Mode != engine.Forward && inq > 0:
			return fmt.Errorf("the %v direction is %v but %d bytes wait unread on its source socket", d, o.Mode, inq)
		case o.Mode == engine.Forward && o.Limit <= int64(inq):
			return fmt.Errorf("the %v limit of %d bytes is already in the forwarder's receive queue (%d)", d, o.Limit, inq)
		}
	}
	return nil
}

// windowsFit checks, for each direction a splice forwards up to a byte
// limit, that the receiver's window takes what the sender may send once
// spliced: what the forwarder's input socket still allows its sender (its
// last advertised right edge past rcv_nxt), which follows the bytes the
// forwarder owes the receiver (the output socket's send queue, the input
// socket's receive queue). A sender the forwarder gave a larger window
// than its receiver's (a pooled upstream connection whose window grew
// on earlier responses, a client connection just opened) would send
// past the receiver's window into the datapath, which drops such
// segments (the receiver would too): losses, a retransmission timeout per
// response. TCP lets no one take a window back, so such a pair is better
// left to an engine whose sockets buffer it. A splice without a limit
// runs on (its senders recover once), and is not refused.
func windowsFit(opts engine.Options, sa, sb tcprepair.State, w [2]tcprepair.Window) error {
	in := [2]tcprepair.State{sa, sb} // the socket each direction arrives on
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		if o := opts.Dir(d); o.Mode != engine.Forward || o.Limit == 0 {
			continue
		}
		src, dst := in[d], in[1-d]
		wSrc, wDst := w[d], w[1-d]
		owed := int64(dst.OutQ) + int64(src.InQ)
		allowed := int64(max(int32(wSrc.RcvWup+wSrc.RcvWnd-src.Params.RcvNxt), 0))
		// The sender's bytes come after the owed ones; past the
		// receiver's window, at most what it is allowed. (Owed bytes
		// past the window are the drain's: it sends them as the
		// window opens, and the sender hears of the window from it.)
		if past := min(allowed, owed+allowed-int64(wDst.SndWnd)); past > 0 {
			return fmt.Errorf("%w: the %v sender may send %d bytes past what the forwarder holds (%d owed), %d of them past the receiver's window (%d)", errWindowMismatch, d, allowed, owed, past, wDst.SndWnd)
		}
	}
	return nil
}

// errWindowMismatch marks a splice refused by windowsFit.
var errWindowMismatch = errors.New("the windows do not match")

// frozen is what unsplicing needs from splice time: the sockets' final
// readings, their windows, and whether their keepalive was on (it is
// turned off while frozen: a keepalive timeout would send a reset).
type frozen struct {
	s         [2]tcprepair.State // by side: 0 client, 1 upstream
	w         [2]tcprepair.Window
	keepalive [2]bool
}

// prepareUnsplice checks that two frozen sockets can be rebuilt later and
// sets the published spec's modes from opts: a byte limit becomes a limit
// sequence number (bytes the source socket holds unread, and those the
// program kept while the pair was held, count toward it, as the drain
// delivers them), a watched or held direction the program's watch (acks
// pass, data is kept back and reported).
func prepareUnsplice(opts engine.Options, spec *datapath.PairSpec, sa, sb tcprepair.State, kept [2]keptRun) error {
	switch {
	case sa.Params.ECN || sb.Params.ECN:
		return errors.New("ECN was negotiated, and TCP_REPAIR cannot restore it for unsplicing")
	case sa.UsecTS || sb.UsecTS:
		return errors.New("microsecond timestamps, which TCP_REPAIR cannot restore for unsplicing")
	case sa.FINReceived || sb.FINReceived || kept[engine.Up].fin || kept[engine.Down].fin:
		return errors.New("a peer already sent its FIN, and TCP_REPAIR cannot restore CLOSE_WAIT for unsplicing")
	}
	// By direction: up's source is the client socket.
	unread := [2]int{sa.InQ + len(kept[engine.Up].data), sb.InQ + len(kept[engine.Down].data)}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		o := opts.Dir(d)
		m := datapath.DirMode{Mode: engine.Forward}
		switch {
		case o.Mode == engine.Watch || o.Mode == engine.Hold:
			if unread[d] > 0 {
				return fmt.Errorf("the %v direction is %v but %d bytes wait unread on its source socket", d, o.Mode, unread[d])
			}
			m.Mode = engine.Watch
		case o.Limit > 0:
			if o.Limit <= int64(unread[d]) {
				return fmt.Errorf("the %v limit of %d bytes is already in the forwarder's receive queue (%d)", d, o.Limit, unread[d])
			}
			m.Limited, m.LimitSeq = true, spec.Dir(d).SndNxt+uint32(o.Limit-int64(unread[d]))
		}
		if d == engine.Up {
			spec.Up.DirMode = m
		} else {
			spec.Down.DirMode = m
		}
	}
	return nil
}

// freezeForUnsplice reads both sockets' windows and turns their keepalive
// off for the time they stay frozen.
func freezeForUnsplice(client, up *net.TCPConn, sa, sb tcprepair.State) (*frozen, error) {
	fz := &frozen{s: [2]tcprepair.State{sa, sb}}
	for i, c := range []*net.TCPConn{client, up} {
		w, err := tcprepair.ReadWindow(c)
		if err != nil {
			return nil, err
		}
		fz.w[i] = w
		err = sockopt.WithFD(c, func(fd int) error {
			on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			if err != nil {
				return err
			}
			fz.keepalive[i] = on != 0
			return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
		})
		if err != nil {
			return nil, fmt.Errorf("SO_KEEPALIVE: %w", err)
		}
	}
	return fz, nil
}

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
}

func newUnsplicer(e *Engine, p *engine.Pair, sp spliced, opts engine.Options) *unsplicer {
	u := &unsplicer{e: e, p: p, opts: opts, spec: sp.spec, fz: sp.fz}
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

// unsplice gives the pair back in control mode; the follower f has its
// counters. end and dir say why (EndLimit, EndData or EndTimer). On a
// failure both peers are reset and the pair's sockets closed: the proxy
// gets EndError, never a connection that lost or repeated bytes.
func (u *unsplicer) unsplice(f *follower, ch <-chan notice, end engine.End, dir engine.Direction) engine.Result {
	start := time.Now()
	u.e.log.Debug("unsplicing", "pair", u.p.ID, "end", end, "dir", dir)
	st, err := u.quiesce(f, ch)
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
		return u.fail(f, err)
	case err != nil: // the pair ended on its own meanwhile (reset, removed)
		f.refresh()
		return f.gone("")
	}
	res := f.end(end, nil)
	res.Dir = dir
	u.e.unspl.done(time.Since(start))
	u.e.rememberClocks(u.spec, u.last)
	if end == engine.EndLimit {
		if err := u.copyRemainder(&res); err != nil {
			res.End, res.Err = engine.EndError, err
		}
	}
	u.e.log.Debug("unspliced", "pair", u.p.ID, "end", end, "dir", dir, "took", time.Since(start),
		"kept_up", u.kept[engine.Up], "kept_down", u.kept[engine.Down], "moved", res.Moved)
	return res
}

// quiesce stops both directions' data (watch), waits until each receiver
// has acknowledged everything forwarded to it, and returns the pair's
// state, whose SndNxt no longer moves.
func (u *unsplicer) quiesce(f *follower, ch <-chan notice) (datapath.PairStats, error) {
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
		u.e.graces.Wait()
	}
	// Both directions stay watched while the sockets are rebuilt: acks
	// pass, nothing advances SndNxt, and data that arrives meanwhile (the
	// next request, typically) is kept rather than lost.
	if st, err = u.waitQuiet(f, ch); err != nil {
		return st, err
	}
	if st.Up.FIN || st.Down.FIN {
		return st, failf("a FIN was forwarded (up %v, down %v): a half-closed connection cannot be rebuilt", st.Up.FIN, st.Down.FIN)
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
		if u.quiet(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, failf("the receivers did not acknowledge everything within %v (up %d of %d, down %d of %d)", quietTimeout,
				u.ackOf(st, engine.Down), st.Up.SndNxt+u.spec.Up.SeqOff, u.ackOf(st, engine.Up), st.Down.SndNxt+u.spec.Down.SeqOff)
		}
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
		if err := sockopt.WithFD(c, func(fd int) error { return tcprepair.RebuildSock(fd, r) }); err != nil {
			return failf("rebuild the %s socket: %v", sideName(side), err)
		}
		rs[side] = r
	}
	if err := u.leaveTable(st, conns); err != nil {
		return err
	}
	for side, c := range conns {
		err := sockopt.WithFD(c, func(fd int) error {
			if err := tcprepair.LeaveRepair(fd); err != nil {
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
	for side, c := range conns {
		u.probeRTT(side, c, rs[side])
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
			if run := runOf(k.Segs, u.rcv[side], 0, 0); len(run.data) > 0 {
				if err := sockopt.WithFD(conns[side], func(fd int) error { return tcprepair.FillRecvQueue(fd, run.data) }); err != nil {
					return failf("append kept bytes to the %s socket: %v", sideName(side), err)
				}
				u.rcv[side] += uint32(len(run.data))
				u.kept[d] += len(run.data)
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
	u.e.release(a)
	u.last = held
	if held.Up.SndNxt != st.Up.SndNxt || held.Down.SndNxt != st.Down.SndNxt {
		return failf("the pair moved while its sockets were rebuilt (up %d -> %d, down %d -> %d)",
			st.Up.SndNxt, held.Up.SndNxt, st.Down.SndNxt, held.Down.SndNxt)
	}
	return nil
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
	u.rcv[side] = si.SndNxt + uint32(len(r.Queued))
	u.kept[in] = len(r.Queued)
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
func (u *unsplicer) probeRTT(side int, c *net.TCPConn, r tcprepair.Rebuild) {
	if r.InFlight == 0 {
		return
	}
	f := segFields{ack: u.rcv[side], win: uint16(min(r.RcvWnd>>min(r.RcvWScale, 14), 0xffff)), ts: r.Timestamps}
	if r.Timestamps {
		clock, err := tcprepair.TSClock(c)
		if err != nil {
			return
		}
		in := engine.Up
		if side == 1 {
			in = engine.Down
		}
		f.tsVal, f.tsEcr = clock, u.last.Dir(in).TSLast
	}
	fd, err := u.e.inject.open(r.Local.Addr().Is6(), u.e.home.do)
	if err != nil {
		u.e.log.Debug("RTT probe", "pair", u.p.ID, "err", err)
		return
	}
	var buf [60 + tsOptLen + 1]byte
	u.e.inject.send(fd, r.Remote.Addr(), buildSegment(buf[:], r.Local, r.Remote, r.SndSeq-1, f, []byte{0}))
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
	u.e.unspl.failed.Add(1)
	u.e.log.Warn("unsplicing failed: both peers reset", "pair", u.p.ID, "err", cause)
	if st, err := f.dp.Lookup(f.a); err == nil {
		u.last = st
	}
	f.dp.Delete(f.a)
	u.e.release(f.a)
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

// unspliceStats counts unsplices and keeps the latest durations, for
// Counters and the bench.
type unspliceStats struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	took       []time.Duration // the latest maxTook
	observe    func(time.Duration)
}

const maxTook = 4096

func (s *unspliceStats) done(d time.Duration) {
	s.ok.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.took) == maxTook {
		s.took = s.took[1:]
	}
	s.took = append(s.took, d)
	if s.observe != nil {
		s.observe(d)
	}
}

// ObserveUnsplice implements engine.UnspliceObserver: fn gets the duration
// of every unsplice from now on (a metrics histogram).
func (e *Engine) ObserveUnsplice(fn func(time.Duration)) {
	e.unspl.mu.Lock()
	defer e.unspl.mu.Unlock()
	e.unspl.observe = fn
}

// UnspliceTimes returns how long the latest unsplices took (at most
// 4096), from the trigger (limit, watch or timer) to the pair back in
// control mode: waiting for the receivers' ACKs, rebuilding both sockets,
// removing the pair.
func (e *Engine) UnspliceTimes() []time.Duration {
	e.unspl.mu.Lock()
	defer e.unspl.mu.Unlock()
	return slices.Clone(e.unspl.took)
}

// peerClock is a peer's TSval seen by the datapath when a pair was
// unspliced. Any TSval a peer sent in the past makes valid timestamp
// offsets (NewPairSpec): an older one only makes the translated clock jump
// ahead further. It spares the next splice of the same connection the
// timestamp probe, whose answer Linux rate-limits to one per 500 ms per
// socket, which a connection spliced per request would hit.
type peerClock struct {
	ts uint32
	at time.Time
}

// clocksTTL bounds how long a remembered clock is used and kept.
const clocksTTL = 10 * time.Minute

// rememberClocks keeps the peers' TSvals of st, by connection: the client's
// under the pair's A tuple, the server's under its B tuple (a proxy may
// pair the same client connection with another upstream next time).
func (e *Engine) rememberClocks(spec datapath.PairSpec, st datapath.PairStats) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.clocks == nil {
		e.clocks = make(map[datapath.Tuple]peerClock)
	}
	if len(e.clocks) >= 4096 {
		for k, c := range e.clocks {
			if now.Sub(c.at) > clocksTTL {
				delete(e.clocks, k)
			}
		}
	}
	if st.Up.TSLast != 0 {
		e.clocks[spec.A] = peerClock{st.Up.TSLast, now}
	}
	if st.Down.TSLast != 0 {
		e.clocks[spec.B] = peerClock{st.Down.TSLast, now}
	}
}

// knownClocks are the known clocks of a pair's two peers: remembered from
// an unsplice, or read from the forwarder's sockets.
type knownClocks struct {
	client, server         uint32
	haveClient, haveServer bool
}

// add adds a TSval of the server (or the client) to k, keeping the newer
// of two: either is a lower bound of the peer's later TSvals, the newer
// one keeps the translated clock's jump smaller.
func (k *knownClocks) add(server bool, ts uint32) {
	v, have := &k.client, &k.haveClient
	if server {
		v, have = &k.server, &k.haveServer
	}
	if !*have || int32(ts-*v) > 0 {
		*v = ts
	}
	*have = true
}

// fill sets the TSvals st lacks from the known clocks.
func (k knownClocks) fill(st datapath.PairStats) datapath.PairStats {
	if st.Up.TSLast == 0 && k.haveClient {
		st.Up.TSLast = k.client
	}
	if st.Down.TSLast == 0 && k.haveServer {
		st.Down.TSLast = k.server
	}
	return st
}

// recallClocks returns what is remembered, and recent, of the clocks of
// the peers of connections a (client) and b (server).
func (e *Engine) recallClocks(a, b datapath.Tuple) knownClocks {
	e.mu.Lock()
	defer e.mu.Unlock()
	var k knownClocks
	if c, ok := e.clocks[a]; ok && time.Since(c.at) < clocksTTL {
		k.client, k.haveClient = c.ts, true
	}
	if c, ok := e.clocks[b]; ok && time.Since(c.at) < clocksTTL {
		k.server, k.haveServer = c.ts, true
	}
	return k
}

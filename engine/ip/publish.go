// Publishing a held pair without losing what arrived while it was held: the segments the program kept join the bytes the forwarder owes, the translation is published, and the keeping stops in one compare-and-swap with the count of kept segments; or, when the splice falls back, the kept segments go into the thawed sockets.

package ip

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

const (
	// keptWait bounds the wait for a segment the program counted and is
	// still writing into the kept ring (microseconds, normally).
	keptWait = 50 * time.Millisecond
	// publishTimeout bounds the rounds of publishing while the peers
	// keep sending: then the keeping stops with what was published, and
	// the segments kept since are left to their senders' retransmission.
	publishTimeout = 20 * time.Millisecond
	// keptLateTimeout bounds the wait for kept segments the program has
	// counted but the reader has not delivered yet (a loaded machine can
	// keep the reader off a CPU for tens of milliseconds): each one given
	// up costs its sender a retransmission timeout.
	keptLateTimeout = time.Second
	// keptPoll is how long a round waits for news of kept segments.
	keptPoll = 200 * time.Microsecond
)

// keptRun is what the segments the program kept of one direction add to
// a splice: the bytes that continue the input socket's stream from its
// rcv_nxt, a FIN right after them, and what the sender's newest segments
// say about it.
type keptRun struct {
	data []byte
	fin  bool
	// rst: a reset was kept.
	rst bool
	// gap counts the bytes kept past a hole (a segment lost before it
	// reached the forwarder): not delivered, left to the sender.
	gap int
	// ack is the sender's newest ack of what the forwarder sent it, win
	// the raw window that came with it.
	ack    uint32
	win    uint16
	hasAck bool
	// tsval is the sender's newest TSval.
	tsval uint32
	hasTS bool
}

// runOf assembles a direction's kept records from rcv_nxt from on; acks
// count when within (ackLo, ackHi], the forwarder's snd_una and snd_nxt
// on the sender's connection.
func runOf(segs []datapath.KeptSeg, from, ackLo, ackHi uint32) keptRun {
	sorted := slices.Clone(segs)
	slices.SortStableFunc(sorted, func(a, b datapath.KeptSeg) int { return int(int32(a.Seq-from)) - int(int32(b.Seq-from)) })
	var r keptRun
	cur := from
	for _, k := range sorted {
		r.rst = r.rst || k.RST()
		if ack := k.Ack(); k.HasAck() && !seqLess(ack, ackLo) && !seqLess(ackHi, ack) && (!r.hasAck || !seqLess(ack, r.ack)) {
			r.ack, r.win, r.hasAck = ack, k.Window(), true
		}
		if ts, _, ok := k.TSVal(); ok && (!r.hasTS || seqLess(r.tsval, ts)) {
			r.tsval, r.hasTS = ts, true
		}
		if k.RST() {
			continue
		}
		end := k.Seq + uint32(len(k.Data))
		switch {
		case r.fin || seqLess(cur, k.Seq):
			r.gap += len(k.Data) // past a hole (or past the FIN)
			continue
		case seqLess(cur, end):
			r.data = append(r.data, k.Data[cur-k.Seq:]...)
			cur = end
		}
		if k.FIN() && end == cur {
			r.fin = true
			cur++
		}
	}
	return r
}

// published is a pair whose translation the program now applies: the
// spec, and per direction what the kept segments added to it.
type published struct {
	spec datapath.PairSpec
	kept [2]keptRun
}

// publish publishes the translation of the held pair a from the final
// reading of its sockets and the segments the program kept, and stops the
// keeping in the same compare-and-swap as the count of kept segments:
// every segment the program kept is in the published spec (its bytes
// owed, delivered by the drain), and every later one is forwarded. The
// peers may send meanwhile: each round publishes what has arrived and
// tries again. An error means falling back (undoSplice): the program
// still keeps every segment of both directions then, whatever the
// published modes say. Only in the rare round that stopped one direction
// and not the other does trouble in the other's later segments (a reset,
// a FIN or a whole limit of a pair that may unsplice, more than the
// guard's span) leave those segments to their senders' retransmission.
func (e *Engine) publish(a datapath.Tuple, sa, sb *tcprepair.State, opts *engine.Options, pub *published) error {
	in := [2]*tcprepair.State{sa, sb} // the socket each direction arrives on
	var stopped [2]bool
	start := time.Now()
	var racing time.Duration // rounds that had every kept segment, and lost the stop to a new one
	ch, err := e.dp.KeptChanged(a)
	if err != nil {
		return err
	}
	for round := 0; ; round++ {
		roundStart := time.Now()
		var st [2]datapath.KeptState
		kept := pub.kept
		for d := range 2 {
			if stopped[d] {
				continue
			}
			if st[d], err = e.dp.Kept(a, engine.Direction(d)); err != nil {
				return err
			}
			p := in[d]
			kept[d] = runOf(st[d].Segs, p.Params.RcvNxt, p.Params.SndUna, p.SndNxt)
		}
		spec, err := roundSpec(sa, sb, &kept, opts)
		if err == nil {
			spec.Keep = true
			if round == 0 || (!stopped[0] && !stopped[1]) {
				err = e.dp.Update(spec)
			} else {
				for d := range 2 {
					if !stopped[d] && err == nil {
						err = e.dp.UpdateDir(a, engine.Direction(d), spec.Dir(engine.Direction(d)))
					}
				}
			}
		}
		if err != nil {
			if !stopped[0] && !stopped[1] {
				return err
			}
			// One direction forwards already: what arrived since in
			// the other stays unpublished.
			e.stopKeeping(a, &stopped, -1)
			return nil
		}
		pub.spec, pub.kept = spec, kept
		// Stop only once every direction still keeping has all its
		// kept segments in the spec, so both stop in the same round.
		ps, err := e.dp.Lookup(a)
		if err != nil {
			return err
		}
		ready := true
		for d := range 2 {
			ready = ready && (stopped[d] || ps.Dir(engine.Direction(d)).Kept == st[d].Done)
		}
		for d := range 2 {
			if ready && !stopped[d] {
				_, ok, err := e.dp.StopKeeping(a, engine.Direction(d), int64(st[d].Done))
				if err != nil {
					return err
				}
				stopped[d] = ok
			}
		}
		if stopped[0] && stopped[1] {
			return nil
		}
		if ready {
			racing += time.Since(roundStart)
		}
		if racing > publishTimeout || time.Since(start) > keptLateTimeout {
			e.log.Debug("publishing while the peers keep sending: the segments kept since are left to retransmission", "pair", a, "racing", racing, "took", time.Since(start))
			e.stopKeeping(a, &stopped, -1)
			return nil
		}
		select {
		case <-ch:
		case <-time.After(keptPoll):
		}
	}
}

// roundSpec is the spec a round of publish writes, for the segments
// kept so far. Apart from publish, whose frame would otherwise hold its
// callees' arguments under every call of its loop.
func roundSpec(sa, sb *tcprepair.State, kept *[2]keptRun, opts *engine.Options) (datapath.PairSpec, error) {
	spec, err := specFor(sa, sb, kept)
	if err == nil && unsplicing(*opts) {
		err = prepareUnsplice(opts, &spec, sa, sb, kept)
	}
	if err == nil && (kept[engine.Up].rst || kept[engine.Down].rst) {
		err = errors.New("a peer reset the connection while the pair was held")
	}
	return spec, err
}

// stopKeeping stops the keeping of the directions not stopped yet, if
// their count is n (any if n < 0).
func (e *Engine) stopKeeping(a datapath.Tuple, stopped *[2]bool, n int64) {
	for d := range 2 {
		if !stopped[d] {
			if _, ok, err := e.dp.StopKeeping(a, engine.Direction(d), n); err == nil && ok {
				stopped[d] = true
			}
		}
	}
}

// announce sends each peer of a published pair a bare ACK from the
// forwarder's end of its connection, when the peer needs news the frozen
// socket cannot give it any more:
//
//   - the forwarder has its kept bytes, as the socket would have said had
//     they reached it. The drain delivers them beside the segments the
//     datapath now forwards, which may overtake them; a sender that saw
//     the receiver acknowledge later bytes first would take the kept ones
//     for lost and send them again;
//   - the forwarder has what the frozen socket received but had not
//     acknowledged yet (a delayed ACK pending when it froze: a frozen
//     socket never sends it): without it, a peer that has sent all its
//     window waits for its retransmission timeout, as nothing else
//     acknowledges those bytes when the receiver already has the ones
//     before them;
//   - the window it may send into is the other peer's, which may reach
//     further than the frozen socket's: a frozen socket whose proxy had
//     stopped reading advertised a small or zero window, and the peer
//     would wait for its persist timer (200 ms and more) before learning
//     better from a window probe's answer.
//
// Losing this ACK costs what the splice cost before it: the receiver's
// acknowledgments, translated, reach the sender too.
//
// Its TSval is the newest the peer may have seen from the forwarder: the
// frozen socket's clock, or, if later, the translated TSval of what the
// datapath or the drain sent the peer since the publish (the drain's
// first burst goes out before this ACK): PAWS drops an ACK older than
// those, and the peer, missing it, retransmits at its loss probe or
// timeout what the forwarder had kept.
func (e *Engine) announce(pub published, sa, sb tcprepair.State, q owedQueues) {
	st, stErr := e.dp.Lookup(pub.spec.A)
	for _, o := range []struct {
		dir  engine.Direction // what the peer sends
		side int              // its connection: 0 client, 1 upstream
		s, r tcprepair.State  // the forwarder's socket on it, and on the receiver's
	}{{engine.Up, 0, sa, sb}, {engine.Down, 1, sb, sa}} {
		p, ds, rs := o.s.Params, pub.spec.Dir(o.dir), pub.spec.Dir(1-o.dir)
		k, rk := pub.kept[o.dir], pub.kept[1-o.dir]
		ack := ds.SndNxt // rcv_nxt past the kept bytes
		w := q.w[o.side]
		old := w.RcvWup + w.RcvWnd
		// The receiver's right edge, in its sender's (this peer's) space:
		// its latest ack and window (kept, or as its socket last saw them).
		redge := rs.AckHi + q.w[1-o.side].SndWnd
		if rk.hasAck {
			redge = rk.ack + uint32(rk.win)<<min(o.r.Params.SndWScale, 14)
		}
		edge := seqMax(old, redge-ds.SeqOff)
		if len(k.data) == 0 && !k.fin && !seqLess(old, edge) && !seqLess(w.RcvWup, ack) {
			continue // nothing the peer does not know
		}
		var win uint64
		if seqLess(ack, edge) {
			win = uint64(edge-ack) >> min(p.RcvWScale, 14)
		}
		f := segFields{ack: ack, win: uint16(min(win, 0xffff)), ts: p.Timestamps, tsVal: p.TSVal, tsEcr: ds.TSLast}
		if toPeer := st.Dir(1 - o.dir); stErr == nil && toPeer.TSLast != 0 {
			f.tsVal = seqMax(f.tsVal, toPeer.TSLast+rs.TSOff)
		}
		if k.hasTS {
			f.tsEcr = k.tsval
		}
		fd, err := e.inject.open(p.Local.Addr().Is6(), e.home.do)
		if err != nil {
			e.log.Warn("announcing a published pair", "err", err)
			return
		}
		var buf [60 + tsOptLen]byte
		// seq: snd_nxt, which the peer's window holds (its rcv_wup is at
		// most that), so the ACK is not taken for an old segment.
		err = e.inject.send(fd, p.Remote.Addr(), buildSegment(buf[:], p.Local, p.Remote, o.s.SndNxt, f, nil))
		e.log.Debug("announced a published pair", "dir", o.dir, "ack", ack, "unacknowledged", ack-w.RcvWup, "kept", len(k.data), "window", f.win, "err", err)
	}
}

// releaseToSockets hands the held pair a back to its (thawed) sockets:
// every segment the program kept goes into them, through the stack as if
// it had just arrived, and the program hands the next ones to the stack,
// released in one compare-and-swap with the count of kept segments, so
// none overtakes those kept before it.
func (e *Engine) releaseToSockets(spec datapath.PairSpec) error {
	a := spec.A
	ch, err := e.dp.KeptChanged(a)
	if err != nil {
		return err
	}
	var sent [2]int
	var released [2]bool
	var errs []error
	deadline := time.Now().Add(publishTimeout)
	for {
		for d := range 2 {
			if released[d] {
				continue
			}
			st, err := e.dp.Kept(a, engine.Direction(d))
			if err != nil {
				return err
			}
			flow := spec.A
			if d == int(engine.Down) {
				flow = spec.B
			}
			for _, k := range st.Segs[sent[d]:] {
				errs = append(errs, e.reinject(flow, k))
			}
			sent[d] = len(st.Segs)
			n := int64(st.Done)
			if time.Now().After(deadline) {
				n = -1 // the rest of what was kept is left to retransmission
			}
			_, ok, err := e.dp.Release(a, engine.Direction(d), n)
			if err != nil {
				return err
			}
			released[d] = ok
		}
		if released[0] && released[1] {
			return errors.Join(errs...)
		}
		select {
		case <-ch:
		case <-time.After(keptPoll):
		}
	}
}

// reinject hands one kept record of flow to the forwarder's own stack,
// as it arrived: through a raw socket to the forwarder's address, which
// the kernel routes over loopback, where the program is not attached.
func (e *Engine) reinject(flow datapath.Tuple, k datapath.KeptSeg) error {
	fd, err := e.inject.open(flow.Src.Addr().Is6(), e.home.do)
	if err != nil {
		return err
	}
	buf := make([]byte, 40+len(k.Header)+len(k.Data))
	if err := e.inject.send(fd, flow.Dst.Addr(), buildKept(buf, flow, k)); err != nil {
		return fmt.Errorf("re-inject a kept segment: %w", err)
	}
	return nil
}

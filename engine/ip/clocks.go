// Learning the peers' timestamp clocks while a pair is held: read the latest TSval each of the forwarder's sockets accepted from its peer, or poke the peer for a segment and read the TSval the datapath saw; and remembering each peer's clock when its pair is unspliced, which spares the next splice of the connection the probe.

package ip

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/peerclock"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// peerClocks is how the engine learns the peers' timestamp clocks: read
// from the forwarder's sockets, probed, or remembered from an unsplice.
type peerClocks struct {
	// reader reads the peers' clocks from the forwarder's sockets; set
	// by the load, nil where it cannot load (the peers are probed
	// instead).
	reader *peerclock.Reader
	// probe, for tests, has the client (0) or server (1) probed even
	// with reader; both: as without it.
	probe [2]bool
	// cache has the clocks remembered at unsplices; it has its lock.
	cache clockCache
	// probes counts window probes sent to learn a peer's clock, read
	// the peers' clocks read from the sockets instead.
	probes, read atomic.Int64
}

// programReading is what the final reading of a pair's sockets by the
// peerclock program adds to their states, by side (0 client, 1 upstream):
// their windows and their own timestamp clocks. Both are nil where the
// sockets were asked instead.
type programReading struct {
	win *[2]tcprepair.Window
	own *[2]uint32
}

// readFinal completes the reading of two sockets frozen by
// freezeInfoPair, once the grace period has ended: one run of the
// peerclock program reads both sockets' queues, windows and clocks and
// the peers' latest TSvals (added to known, see clocksFrom), in the
// engine's namespace. Where the program cannot (a socket not found,
// urgent data pending) the sockets are asked, and the peers' clocks stay
// unknown.
func (e *Engine) readFinal(client, up *net.TCPConn, sa, sb *tcprepair.State, known *knownClocks) (programReading, error) {
	conns := [2]peerclock.Conn{{Local: sa.Params.Local, Remote: sa.Params.Remote}, {Local: sb.Params.Local, Remote: sb.Params.Remote}}
	got, err := e.readSockets(conns)
	qa, okA := got[0].Seqs()
	qb, okB := got[1].Seqs()
	if err != nil || !okA || !okB {
		return programReading{}, e.askSockets(client, up, sa, sb, &conns, &got, err)
	}
	sa.ApplySeqs(qa)
	sb.ApplySeqs(qb)
	// A FIN that reached a socket during the grace period changed its
	// state since TCP_INFO was read.
	sa.SetTCPState(uint8(got[0].State))
	sb.SetTCPState(uint8(got[1].State))
	if reason := unspliceable(*sa, *sb); reason != "" {
		return programReading{}, errors.New(reason)
	}
	if err := outOfOrder(got); err != nil {
		e.counts.outOfOrderRefused.Add(1)
		return programReading{}, err
	}
	if err := datapath.CanTranslate(sa.Params, sb.Params); err != nil {
		return programReading{}, err
	}
	r := programReading{
		win: &[2]tcprepair.Window{got[0].Window(), got[1].Window()},
		own: &[2]uint32{got[0].TSClock(sa.UsecTS), got[1].TSClock(sb.UsecTS)},
	}
	*known = e.clocksFrom(got, sa.Params.Timestamps, sa.UsecTS, *known)
	return r, nil
}

// askSockets reads two frozen sockets with socket options, where the
// peerclock program could not (readErr, or got lacks a socket). Apart
// from readFinal, whose frame it would grow by the record's arguments.
func (e *Engine) askSockets(client, up *net.TCPConn, sa, sb *tcprepair.State, conns *[2]peerclock.Conn, got *[2]peerclock.Sock, readErr error) (err error) {
	e.log.Debug("the peerclock program could not read the sockets: asking them", "conns", *conns, "read", *got, "err", readErr)
	if *sa, *sb, err = rereadPair(client, up, *sa, *sb); err == nil {
		err = datapath.CanTranslate(sa.Params, sb.Params)
	}
	return err
}

// outOfOrder refuses a splice while a socket holds segments past a hole.
// No socket option reads them, so a splice would leave them behind, and
// their sender, to which the socket acknowledged them selectively (SACK),
// sends them again only once a retransmission timeout makes it doubt
// those SACKs. The receiver's acknowledgments, stuck below them, stretch
// that timeout meanwhile: in TestLabHTTPReverseIPRandom (5% loss) a
// client held 53 such segments, and the server still lacked them when
// the unsplice gave up 15 s later. A fallback gives the sockets back
// what the program kept while the pair was held, the hole's
// retransmission included if it came, and the proxy reads on; a later
// splice of the connection may find the queue empty.
func outOfOrder(got [2]peerclock.Sock) error {
	for i, side := range [2]string{"client", "upstream"} {
		if got[i].OutOfOrder {
			return fmt.Errorf("the forwarder's %s socket holds out-of-order segments, which its peer has acknowledged selectively and the splice cannot take", side)
		}
	}
	return nil
}

// readSockets runs the peerclock program on two of the forwarder's
// sockets, in the engine's namespace: named by its id where the process
// lives elsewhere, else entered (do: Splice runs on its caller's
// goroutine, whose thread may be locked in any namespace).
func (e *Engine) readSockets(conns [2]peerclock.Conn) (got [2]peerclock.Sock, err error) {
	switch h := e.home; {
	case h.atHome:
		return e.clocks.reader.Read(conns, peerclock.CurrentNetns)
	case h.nsid >= 0:
		return e.clocks.reader.Read(conns, h.nsid)
	}
	err = e.home.do(func() (err error) {
		got, err = e.clocks.reader.Read(conns, peerclock.CurrentNetns)
		return err
	})
	return got, err
}

// clocksFrom adds to known the peers' latest TSvals as the forwarder's
// frozen sockets recorded them (tp->rx_opt.ts_recent, read by the
// peerclock program): a TSval the peer sent, so a lower bound of every
// TSval it sends later, which is all NewPairSpec needs. A socket's value
// is taken only if it stored ts_recent recently enough (tsRecentMaxAge);
// otherwise that peer is probed.
func (e *Engine) clocksFrom(got [2]peerclock.Sock, timestamps, usecTS bool, known knownClocks) knownClocks {
	if !timestamps {
		return known
	}
	maxAge := tsRecentMaxAge(usecTS)
	for i, g := range got {
		switch {
		case e.clocks.probe[i]:
		case !g.Stamped || g.Age > maxAge:
			// Never stored (a socket rebuilt by an unsplice, before its
			// peer sent), or so old that the peer's clock may have run
			// more than half its space since.
		default:
			known.add(i == 1, g.TSRecent)
			e.clocks.read.Add(1)
		}
	}
	return known
}

// tsRecentMaxAge bounds the age of a ts_recent taken as a peer's clock.
// The translated TSvals run ahead of the forwarder's clock by however far
// the peer's clock moved since ts_recent was stored; PAWS compares TSvals
// modulo 2^32, so that lead must stay well under 2^31 ticks: 24 days at
// 1 ms per tick (RFC 7323 allows no faster clock), 35 minutes in
// microseconds (Linux's usec timestamps).
func tsRecentMaxAge(usecTS bool) time.Duration {
	if usecTS {
		return 10 * time.Minute
	}
	return 24 * time.Hour
}

// probeClocks makes both frozen sockets send a window probe, except
// toward a peer whose clock is known; the peers answer with an ACK
// carrying their current TSval, which the held pair records (learnClocks
// reads it).
func (e *Engine) probeClocks(client, up *net.TCPConn, sa, sb tcprepair.State, known knownClocks) error {
	held, err := datapath.NewPairSpec(sa.Params, sb.Params)
	if err != nil {
		return err
	}
	// Seed the seq guard so the answers count as the peers' own; the
	// program goes on keeping every segment.
	held.Up.Mode, held.Down.Mode = engine.Hold, engine.Hold
	held.Keep = true
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
func (e *Engine) poke(c *net.TCPConn, s tcprepair.State) error {
	e.clocks.probes.Add(1)
	if !s.FINReceived {
		return tcprepair.Poke(c)
	}
	ts, err := tcprepair.TSClock(c)
	if err != nil {
		return fmt.Errorf("TCP_TIMESTAMP: %w", err)
	}
	p := s.Params
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
func rereadPair(client, up *net.TCPConn, sa, sb tcprepair.State) (tcprepair.State, tcprepair.State, error) {
	na, err := tcprepair.Reread(client, sa)
	if err != nil {
		return sa, sb, fmt.Errorf("read the client connection: %w", err)
	}
	nb, err := tcprepair.Reread(up, sb)
	if err != nil {
		return sa, sb, fmt.Errorf("read the upstream connection: %w", err)
	}
	if reason := unspliceable(na, nb); reason != "" {
		return sa, sb, errors.New(reason)
	}
	return na, nb, nil
}

// learnClocks waits for the TSvals the probes' answers carried (probing
// again once if one is missing; a known one needs no answer), then takes
// the sockets' own clocks, which are at least the TSval of anything they
// sent: own, read with the final reading, if no probe went out since
// (probed is zero), else read now.
func (e *Engine) learnClocks(client, up *net.TCPConn, sa, sb tcprepair.State, pa, pb *tcprepair.ConnParams, probed time.Time, timeout time.Duration, known knownClocks, own *[2]uint32) error {
	a := datapath.Tuple{Src: pa.Remote, Dst: pa.Local}
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
	switch {
	case own != nil && probed.IsZero():
		pa.TSVal, pb.TSVal = own[0], own[1]
	default:
		if pa.TSVal, err = tcprepair.TSClock(client); err != nil {
			return fmt.Errorf("TCP_TIMESTAMP: %w", err)
		}
		if pb.TSVal, err = tcprepair.TSClock(up); err != nil {
			return fmt.Errorf("TCP_TIMESTAMP: %w", err)
		}
	}
	pa.TSVal += tsLead(sa.UsecTS)
	pb.TSVal += tsLead(sa.UsecTS)
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
func clockAnswered(st datapath.PairStats) bool { return st.Up.TSLast != 0 && st.Down.TSLast != 0 }

// awaitClockAnswers polls the held pair a until both peers' TSvals are
// known (seen by the datapath, or from an earlier unsplice) or deadline
// passes, and returns its last state.
func (e *Engine) awaitClockAnswers(a datapath.Tuple, deadline time.Time, known knownClocks) (datapath.PairStats, error) {
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 2*time.Millisecond) {
		st, err := e.dp.Lookup(a)
		if err == nil {
			st = e.keptClocks(a, known.fill(st))
		}
		if err != nil || clockAnswered(st) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(wait)
	}
}

// keptClocks sets the TSvals st lacks from the segments the program kept
// of the held pair a: any segment of a peer carries its clock, and one
// that arrived before the probe seeded the sequence guard (which the
// program's own clock learning needs) would otherwise count for nothing.
// A segment counts if its seq lies within the guard's span of the
// direction's SndNxt, as the program requires of a probe's answer.
func (e *Engine) keptClocks(a datapath.Tuple, st datapath.PairStats) datapath.PairStats {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		ds := st.Dir(d)
		if ds.TSLast != 0 {
			continue
		}
		k, err := e.dp.Kept(a, d)
		if err != nil {
			continue
		}
		var ts uint32
		for _, r := range k.Segs {
			v, _, ok := r.TSVal()
			span := uint32(guardSpan(14))
			if ok && v != 0 && r.Seq-ds.SndNxt+span <= 2*span && (ts == 0 || seqLess(ts, v)) {
				ts = v
			}
		}
		if d == engine.Up {
			st.Up.TSLast = ts
		} else {
			st.Down.TSLast = ts
		}
	}
	return st
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

// clockCache holds, by connection tuple, the peers' latest TSvals seen
// by the datapath when a pair was unspliced, for the next splice of the
// same connections. The zero value is empty.
type clockCache struct {
	mu     sync.Mutex // guards byConn
	byConn map[datapath.Tuple]peerClock
}

// remember records the peers' TSvals of st, by connection: the client's
// under the pair's A tuple, the server's under its B tuple (a proxy may
// pair the same client connection with another upstream next time).
func (c *clockCache) remember(spec datapath.PairSpec, st datapath.PairStats) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byConn == nil {
		c.byConn = make(map[datapath.Tuple]peerClock)
	}
	if len(c.byConn) >= 4096 {
		for k, pc := range c.byConn {
			if now.Sub(pc.at) > clocksTTL {
				delete(c.byConn, k)
			}
		}
	}
	if st.Up.TSLast != 0 {
		c.byConn[spec.A] = peerClock{st.Up.TSLast, now}
	}
	if st.Down.TSLast != 0 {
		c.byConn[spec.B] = peerClock{st.Down.TSLast, now}
	}
}

// knownClocks are the known clocks of a pair's two peers: remembered from
// an unsplice, or read from the forwarder's sockets.
type knownClocks struct {
	client, server         uint32
	haveClient, haveServer bool
}

// add adds a TSval of the server (or the client) to k, taking the newer
// of two: either is a lower bound of the peer's later TSvals, the newer
// one makes the translated clock's jump smaller.
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

// recall returns what is remembered, and recent, of the clocks of
// the peers of connections a (client) and b (server).
func (c *clockCache) recall(a, b datapath.Tuple) knownClocks {
	c.mu.Lock()
	defer c.mu.Unlock()
	var k knownClocks
	if pc, ok := c.byConn[a]; ok && time.Since(pc.at) < clocksTTL {
		k.client, k.haveClient = pc.ts, true
	}
	if pc, ok := c.byConn[b]; ok && time.Since(pc.at) < clocksTTL {
		k.server, k.haveServer = pc.ts, true
	}
	return k
}

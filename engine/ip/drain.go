// Delivering the bytes buffered in the forwarder at splice time: a small retransmitting sender that injects them at their sequence numbers, new runs as GSO packets (gso.go) and retransmissions through a raw socket (inject.go, segment.go), until the ACK the datapath tracks passes their end.

package ip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

const (
	// drainPoll is how often a drain reads the receiver's ACK from the
	// datapath while bytes are outstanding.
	drainPoll = 250 * time.Microsecond
	// drainBurst bounds the segments one direction sends per poll, so a
	// burst does not overflow the receiving device's backlog.
	drainBurst = 64
	// drainMinRTO and drainMaxRTO bound the retransmission timeout.
	drainMinRTO = 5 * time.Millisecond
	drainMaxRTO = 500 * time.Millisecond
	// tsOptLen is the timestamp option with its two NOPs.
	tsOptLen = 12
)

// owed is one direction's bytes the forwarder had acknowledged to their
// sender but not yet delivered to their receiver when it spliced: the
// output socket's send queue followed by the input socket's receive queue,
// at their sequence numbers on the output connection.
type owed struct {
	dir      engine.Direction
	src, dst netip.AddrPort // the forwarder's end of the output connection, the receiver's
	start    uint32         // sequence number of data[0]
	data     []byte         // pooled: freed when the drain ends (free)
	fin      bool           // a FIN follows the data
	mss      int            // payload bytes per segment, options excluded
	ts       bool           // segments carry timestamps
	// first stands in for what the datapath has not seen yet.
	first outputView
	// path takes new runs of owed bytes to the receiver as GSO packets
	// (gso.go); nil: one segment at a time through the raw socket.
	path *linkPath
	// tx is how far the owed bytes went.
	tx sendState
	// sender is the sender's side, told of the receiver's windows.
	sender senderSide
	// logged counts for the log.
	logged drainCounts
}

// outputView is the frozen output socket's view, which stands in before
// the datapath has seen a packet of the receiver (or of the sender): the
// receiver's right edge, the ACK and raw window the forwarder last sent
// it.
type outputView struct {
	edge, ack uint32
	win       uint16
}

// sendState is the retransmitting sender's state of one direction: what
// the receiver acknowledged and what was sent, the retransmission timer,
// and loss recovery without SACK (NewReno, RFC 6582): the receiver's
// packets since the ACK last advanced count as duplicate ACKs;
// recovering until the ACK reaches recover, each partial ACK retransmits
// the next hole at once instead of after a timeout.
type sendState struct {
	acked, nxt uint32
	lastMove   time.Time // last ACK advance or retransmission
	rto, rto0  time.Duration
	done       bool
	ackPackets uint64 // the receiver's packet count when the ACK last advanced
	recovering bool
	recover    uint32
}

// senderSide is what relayWindow needs of the sender's connection: the
// forwarder's end of it and the sender's; the sequence number the
// forwarder has acknowledged to the sender (its snd_una, ahead of
// everything the receiver acknowledges until the owed bytes are
// delivered), the scale of the windows the forwarder sends it, the
// forwarder's highest seq on that connection before the splice, and the
// right edge last advertised to it.
type senderSide struct {
	src, dst netip.AddrPort
	ack      uint32
	scale    uint8
	seq0     uint32
	told     uint32
	relayed  int // window updates relayed, for the log
}

// drainCounts are a direction's drain in numbers, for the log.
type drainCounts struct {
	bytes        int // len(data), once data is freed
	sent, resent int // segments
	fastResent   int // segments retransmitted on duplicate or partial ACKs
	gsoPackets   int
}

// dupAckThreshold is how many packets from the receiver without the ACK
// advancing make the drain retransmit its first unacknowledged segment.
const dupAckThreshold = 3

func (o *owed) end() uint32 { return o.start + uint32(len(o.data)) + b2u(o.fin) }

// takeAck takes the receiver's latest ACK and packet count. It reports
// whether the ACK advanced over owed bytes, and whether the first
// unacknowledged segment should go again at once: a partial ACK during
// recovery (the next hole), or the receiver answering dupAckThreshold
// times without taking it (lost, or refused).
func (o *owed) takeAck(ackHi uint32, packets uint64, now time.Time) (advanced, resend bool) {
	end := o.end()
	if ack := seqMin(ackHi, end); seqLess(o.tx.acked, ack) {
		o.tx.acked, o.tx.lastMove, o.tx.rto, o.tx.ackPackets = ack, now, o.tx.rto0, packets
		advanced = true
		if o.tx.recovering && seqLess(ack, o.tx.recover) && ack != end {
			resend = true
		} else {
			o.tx.recovering = false
		}
	} else if !o.tx.recovering && seqLess(o.tx.acked, o.tx.nxt) && packets-o.tx.ackPackets >= dupAckThreshold {
		o.tx.recovering, o.tx.recover = true, o.tx.nxt
		resend = true
	}
	if o.tx.acked == end {
		o.tx.done = true
	}
	o.tx.nxt = seqMax(o.tx.nxt, o.tx.acked)
	return advanced, resend
}

// timedOut reports whether the first unacknowledged segment is due again
// because nothing moved for a retransmission timeout, and backs the
// timeout off. With segments sent after it outstanding it also enters
// recovery up to them: they went in the same burst and may be lost with
// it, so each partial ACK now retransmits the next hole at once, not a
// timeout later (seen in the lab: a 38 KB hole at the end of a drain
// refilled one 1,448-byte segment per 5 ms timeout, a 160 ms stall for
// that HTTP response).
func (o *owed) timedOut(now time.Time) bool {
	if now.Sub(o.tx.lastMove) < o.tx.rto {
		return false
	}
	o.tx.lastMove, o.tx.rto = now, min(2*o.tx.rto, drainMaxRTO)
	if seqLess(o.tx.acked+uint32(o.mss), o.tx.nxt) {
		o.tx.recovering, o.tx.recover = true, o.tx.nxt
	}
	return true
}

// drainer delivers a spliced pair's owed bytes beside the datapath.
type drainer struct {
	dp   *datapath.Datapath
	in   *injector
	fd   int
	a    datapath.Tuple
	spec datapath.PairSpec
	dirs []*owed
	buf  []byte
	// started: start has sent the first bursts.
	started bool
	// progress is when a receiver last acknowledged owed bytes (Unix
	// nanoseconds): the pair is not idle while its drain advances, even
	// if the datapath forwards nothing new.
	progress atomic.Int64
}

// lastProgress is when a receiver last acknowledged owed bytes, or the
// zero time.
func (d *drainer) lastProgress() time.Time {
	if n := d.progress.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// start sends each direction's first burst of owed bytes, within the
// receiver's window, and is called before the senders are told that the
// pair is published (announce). The owed bytes start the receiver's
// stream, so they should arrive first: sent after the datapath had begun
// forwarding the sender's later bytes (the announce's ACK sets the sender
// going, and its burst crossed the datapath within that very send), they
// reached the receiver out of order, which then acknowledged each drained
// segment at once with SACK blocks, and the sender, reading those blocks
// in acknowledgments older than its snd_una, took holes for losses and
// retransmitted (an HTTP body of 1 MiB through http-reverse: 46 of its
// 724 segments per request, wrk with 16 connections). run goes on from
// here.
func (d *drainer) start() error {
	if d.started {
		return nil
	}
	now := time.Now()
	st, err := d.dp.Lookup(d.a)
	if err != nil {
		return err
	}
	d.started = true
	d.buf = scratchBuf()
	g := d.in.gso.Load()
	for _, o := range d.dirs {
		o.tx.acked, o.tx.nxt, o.tx.lastMove, o.tx.rto = o.start, o.start, now, o.tx.rto0
		o.tx.ackPackets = st.Dir(1 - o.dir).Packets
		if g != nil && len(o.data) > o.mss {
			o.path = g.path(d.outDevice(o), o.dst.Addr())
		}
	}
	for _, o := range d.dirs {
		for d.step(o, st, now) {
		}
	}
	return nil
}

// run sends and retransmits until every owed byte is acknowledged, stop
// closes, or the pair leaves the table (reset, removed).
func (d *drainer) run(stop <-chan struct{}) error {
	defer d.free()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		wait, done, err := d.poll()
		if done {
			return err
		}
		t.Reset(wait)
		select {
		case <-stop:
			return errors.New("stopped while draining")
		case <-t.C:
		}
	}
}

// poll is one round of run: it reads the pair, sends what the receivers
// allow and what timed out, and says whether the drain is over (with its
// error) or else how long to wait before the next round. A follower
// without an unsplicer polls from its own loop (follow) rather than
// starting a goroutine for run.
func (d *drainer) poll() (wait time.Duration, done bool, err error) {
	if err := d.start(); err != nil {
		return 0, true, err
	}
	st, err := d.dp.Lookup(d.a)
	if err != nil {
		return 0, true, err
	}
	if st.Phase == datapath.PhaseClosed {
		return 0, true, errors.New("the pair was reset while draining")
	}
	pending, busy := false, false
	for _, o := range d.dirs {
		if o.tx.done {
			continue
		}
		if d.step(o, st, time.Now()) {
			busy = true
		}
		pending = pending || !o.tx.done
	}
	switch {
	case !pending:
		return 0, true, nil
	case busy:
		return 0, false, nil
	}
	return drainPoll, false, nil
}

// free gives the drain's buffers back for reuse once it has ended.
func (d *drainer) free() {
	if d.buf != nil {
		freeScratch(d.buf)
		d.buf = nil
	}
	for _, o := range d.dirs {
		freeOwed(o.data)
		o.data = nil
	}
}

// step advances one direction: it takes the receiver's ACK, retransmits
// the first unacknowledged segment on duplicate or partial ACKs and after
// a timeout, and sends new segments within the receiver's window. It
// reports whether it stopped at the burst limit with more to send.
func (d *drainer) step(o *owed, st datapath.PairStats, now time.Time) bool {
	other, otherSpec := st.Dir(1-o.dir), d.spec.Dir(1-o.dir)
	f := d.fields(o, st)
	advanced, resend := o.takeAck(other.AckHi, other.Packets, now)
	if advanced {
		d.progress.Store(now.UnixNano())
	}
	if resend {
		d.fastRetransmit(o, f)
	}
	if o.tx.done {
		return false
	}
	if o.timedOut(now) {
		// Lost, or the window closed: the first unacknowledged segment
		// again (also a window probe; the receiver answers it).
		d.send(o, o.tx.acked, f)
		o.logged.resent++
		d.in.drainResent.Add(1)
	}
	edge := o.first.edge
	if other.Packets > 0 {
		edge = other.AckHi + uint32(other.Window)<<min(otherSpec.InShift, 14)
		d.relayWindow(o, st, edge)
	}
	limit := seqMin(o.end(), edge)
	for n := 0; seqLess(o.tx.nxt, limit); {
		if n >= drainBurst {
			return true
		}
		space, segs := d.sendNew(o, limit, drainBurst-n, f)
		o.tx.nxt += uint32(space)
		o.logged.sent += segs
		n += segs
	}
	return false
}

// outDevice is the forwarder's device toward o's receiver.
func (d *drainer) outDevice(o *owed) int {
	if o.dir == engine.Up {
		return d.spec.IfindexB
	}
	return d.spec.IfindexA
}

// sendNew sends owed bytes for the first time from o.tx.nxt, below limit
// and in at most maxSegs segments: as one GSO packet when they fill more
// than one segment and o has a path for it, else one segment. It returns
// the sequence space sent and the segments it makes.
func (d *drainer) sendNew(o *owed, limit uint32, maxSegs int, f segFields) (space, segs int) {
	d.in.drainPackets.Add(1)
	if o.path != nil {
		if space, segs, ok := d.sendGSO(o, limit, maxSegs, f); ok {
			return space, segs
		}
	}
	return d.send(o, o.tx.nxt, f), 1
}

// sendGSO sends the owed bytes from o.tx.nxt below limit, as many segments
// as one GSO packet to o.path takes (at most maxSegs), if they fill more
// than one segment. A packet the kernel refuses ends GSO for this drain:
// the caller sends one segment instead.
func (d *drainer) sendGSO(o *owed, limit uint32, maxSegs int, f segFields) (space, segs int, ok bool) {
	off := int(o.tx.nxt - o.start)
	hdrLen := 40 + 20 + tsOptLen // IP and TCP headers at most, options included
	n := min(int(limit-o.tx.nxt), len(o.data)-off, o.path.maxPayload(hdrLen, o.mss), maxSegs*o.mss)
	if n <= o.mss {
		return 0, 0, false
	}
	f.fin = o.fin && off+n == len(o.data) // the kernel keeps it on the last segment only
	pkt := buildGSO(d.buf, o.path, o.src, o.dst, o.tx.nxt, f, o.data[off:off+n], o.mss)
	if err := d.in.gso.Load().send(o.path, pkt); err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) {
		o.path = nil
		return 0, 0, false
	}
	d.in.drainGSO.Add(1)
	o.logged.gsoPackets++
	return n + int(b2u(f.fin)), (n + o.mss - 1) / o.mss, true
}

// relayWindow tells the sender of o's direction the receiver's window
// while the owed bytes are being delivered. The forwarder acknowledged
// everything up to senderAck to the sender (its socket, or the ACK
// announce sent), so the receiver's own ACKs, translated, stay below the
// sender's snd_una until the owed bytes are in: the sender takes them for
// old and ignores their windows. A sender that had filled its window
// would wait for its persist timer, backing off to seconds, though the
// receiver has room: so each time the receiver's right edge (edge, in
// the output connection's space) moves past what the sender was told, the
// sender gets a bare ACK at senderAck with the window up to it.
func (d *drainer) relayWindow(o *owed, st datapath.PairStats, edge uint32) {
	same, sameSpec := st.Dir(o.dir), d.spec.Dir(o.dir)
	other, otherSpec := st.Dir(1-o.dir), d.spec.Dir(1-o.dir)
	if !o.sender.src.IsValid() || !seqLess(other.AckHi-sameSpec.SeqOff, o.sender.ack) {
		return // no sender known, or the receiver caught up: the datapath relays its windows
	}
	redge := edge - sameSpec.SeqOff // in the sender's space
	if !seqLess(o.sender.told, redge) {
		return
	}
	o.sender.told = redge
	f := segFields{ack: o.sender.ack, win: uint16(min(uint64(redge-o.sender.ack)>>min(o.sender.scale, 14), 0xffff)), ts: o.ts}
	if o.ts {
		f.tsVal, f.tsEcr = other.TSLast+otherSpec.TSOff, same.TSLast
	}
	// The highest seq the forwarder sent the sender: in its window.
	seq := seqMax(o.sender.seq0, other.SndNxt+otherSpec.SeqOff)
	d.in.send(d.fd, o.sender.dst.Addr(), buildSegment(d.buf, o.sender.src, o.sender.dst, seq, f, nil))
	o.sender.relayed++
}

// fastRetransmit sends the first unacknowledged segment again at once.
func (d *drainer) fastRetransmit(o *owed, f segFields) {
	d.send(o, o.tx.acked, f)
	o.logged.fastResent++
	d.in.drainResent.Add(1)
}

// fields are the ACK, window and timestamps of the drain's next segments
// in o's direction: the latest the datapath translated, or, before it
// saw any, the frozen output socket's own.
func (d *drainer) fields(o *owed, st datapath.PairStats) segFields {
	t := translatedFields(st, d.spec, o.dir, o.ts)
	f := segFields{ack: o.first.ack, win: o.first.win, ts: o.ts, tsVal: t.tsVal, tsEcr: t.tsEcr}
	if st.Dir(o.dir).Packets > 0 {
		f.ack, f.win = seqMax(o.first.ack, t.ack), t.win
	}
	return f
}

// send injects the segment of o starting at seq and returns the sequence
// space it takes (its bytes, and its FIN if it carries the last byte).
func (d *drainer) send(o *owed, seq uint32, f segFields) int {
	off := int(seq - o.start)
	n := min(o.mss, len(o.data)-off)
	f.fin = o.fin && off+n == len(o.data)
	pkt := buildSegment(d.buf, o.src, o.dst, seq, f, o.data[off:off+n])
	d.in.send(d.fd, o.dst.Addr(), pkt)
	return n + int(b2u(f.fin))
}

// logDone logs how the drain went. Every short pair ends a drain, so
// nothing is formatted unless the line is written.
func (d *drainer) logDone(log *slog.Logger, pair uint64, err error) {
	level := slog.LevelDebug
	if err != nil {
		level = slog.LevelInfo
	}
	if !log.Enabled(context.Background(), level) {
		return
	}
	args := []any{"pair", pair}
	for _, o := range d.dirs {
		args = append(args, o.dir.String(), fmt.Sprintf("%d bytes in %d segments (%d GSO packets), %d retransmitted on timeouts (first after %v), %d on duplicate or partial ACKs, %d windows relayed to the sender", o.logged.bytes, o.logged.sent, o.logged.gsoPackets, o.logged.resent, o.tx.rto0, o.logged.fastResent, o.sender.relayed))
	}
	if err != nil {
		log.Info("drain ended early", append(args, "err", err)...)
		return
	}
	log.Debug("owed bytes delivered", args...)
}

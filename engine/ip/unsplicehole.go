// Unsplicing's wait for quiet, when a receiver lost forwarded bytes whose every retransmission also carries bytes past the boundary: the program keeps those whole, so the engine sends the receiver the lost bytes from the kept copy.

package ip

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// Why: Linux, retransmitting a segment shorter than the MSS, merges the
// segments after it into the retransmission, up to one MSS
// (tcp_retrans_try_collapse; net.ipv4.tcp_retrans_collapse). When a
// receiver lost the last segment before a direction's boundary (its
// limit, or where a watch or a hold began) and the sender had already
// sent bytes past it, which the program kept, every retransmission
// starts below the boundary and ends past it. The program keeps such a
// segment whole (the bytes past the boundary belong to the control
// plane): the receiver never got the bytes below, and unsplicing waited
// for their acknowledgment until quietTimeout, then reset both peers
// (TestLabHTTPReverseIPRandom at 5% loss, about one run in ten with 32
// seeds; TestEngineUnspliceRetransmissionPastTheLimit).

const (
	// holeRTO0 is how long a receiver has to acknowledge the bytes
	// sent into its hole before they are sent again; it doubles up to
	// holeRTOMax while its ack does not move.
	holeRTO0   = 10 * time.Millisecond
	holeRTOMax = time.Second
)

// holes is, by direction, when the receiver's hole was last filled: its
// ack then, and when to fill it again if that ack has not moved.
type holes struct {
	ack  [2]uint32
	next [2]time.Time
	rto  [2]time.Duration
}

// fillHoles sends each direction's receiver, from the segments the
// program kept, the forwarded bytes it has not acknowledged: at once
// when its ack moved since the last time, else when its backoff ends.
func (u *unsplicer) fillHoles(st datapath.PairStats, now time.Time) {
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		u.fillHole(st, d, now)
	}
}

func (u *unsplicer) fillHole(st datapath.PairStats, d engine.Direction, now time.Time) {
	h := &u.holes
	sd := st.Dir(d)
	ack := u.ackOf(st, d.Reverse()) // the receiver's, in the output space
	from, short := u.unacknowledged(st, d)
	if sd.Packets == 0 || !short {
		return // nothing forwarded waits for an acknowledgment
	}
	if ack == h.ack[d] && now.Before(h.next[d]) {
		return
	}
	k, err := u.e.dp.Kept(u.spec.A, d)
	if err != nil {
		return
	}
	data := runOf(k.Segs, from, 0, 0).data
	data = data[:min(len(data), int(sd.SndNxt-from))]
	if len(data) == 0 {
		return // no kept copy: the sender's own retransmission passes the program
	}
	if ack != h.ack[d] || h.rto[d] == 0 {
		h.rto[d] = holeRTO0
	} else {
		h.rto[d] = min(2*h.rto[d], holeRTOMax)
	}
	h.ack[d], h.next[d] = ack, now.Add(h.rto[d])
	u.sendHole(st, d, ack, data)
}

// unacknowledged is the first byte of direction d its receiver has not
// acknowledged, in the sender's space, and whether it lies below SndNxt:
// forwarded and not acknowledged.
func (u *unsplicer) unacknowledged(st datapath.PairStats, d engine.Direction) (from uint32, short bool) {
	from = u.ackOf(st, d.Reverse()) - u.spec.Dir(d).SeqOff
	return from, seqLess(from, st.Dir(d).SndNxt)
}

// sendHole sends data, the bytes of direction d from ack on (in the
// output space), to d's receiver through the raw socket, in segments of
// its MSS, with the ACK, window and timestamps the program would write.
func (u *unsplicer) sendHole(st datapath.PairStats, d engine.Direction, ack uint32, data []byte) {
	ps := u.fz.s[int(d.Reverse())].Params // the socket that sends d's output: the client's for down
	fd, err := u.e.inject.open(ps.Local.Addr().Is6(), u.e.home.do)
	if err != nil {
		u.e.log.Debug("filling a receiver's hole", "pair", u.p.ID, "err", err)
		return
	}
	mss := int(ps.PeerMSS)
	if mss < 536 {
		mss = 536
	}
	f := translatedFields(st, u.spec, d, ps.Timestamps)
	buf := make([]byte, 60+tsOptLen+mss)
	for off := 0; off < len(data); off += mss {
		seg := data[off:min(off+mss, len(data))]
		u.e.inject.send(fd, ps.Remote.Addr(), buildSegment(buf, ps.Local, ps.Remote, ack+uint32(off), f, seg))
	}
	u.e.log.Debug("sent a receiver the bytes it lost from a kept retransmission", "pair", u.p.ID, "dir", d,
		"seq", ack, "bytes", len(data), "again_in", u.holes.rto[d])
}

// translatedFields are the ACK, window and timestamps the program writes
// now on direction d's segments toward its receiver: the sender's
// latest, translated.
func translatedFields(st datapath.PairStats, spec datapath.PairSpec, d engine.Direction, ts bool) segFields {
	same, other := st.Dir(d), st.Dir(d.Reverse())
	sameSpec, otherSpec := spec.Dir(d), spec.Dir(d.Reverse())
	f := segFields{ack: same.AckHi - otherSpec.SeqOff, win: rescaleWindow(same.Window, sameSpec.InShift, sameSpec.OutShift), ts: ts}
	if ts {
		f.tsVal, f.tsEcr = same.TSLast+sameSpec.TSOff, other.TSLast
	}
	return f
}

// stallReport says, for a wait that timed out, how the drain of owed
// bytes went if the splice had one, what the program dropped since
// shortly before the splice began (every pair's drops: the counters are
// global, and read at most once a second, recentDrops; a sender
// whose retransmissions were dropped backs its timeout off, and may not
// send again within the wait) and what it kept of each direction whose
// receiver is short, relative to the receiver's ack: where a lost
// byte's retransmission went.
func (u *unsplicer) stallReport(f *follower, st datapath.PairStats) string {
	var b strings.Builder
	if f.drained != nil {
		// The splice owed bytes: a receiver short of them waits on the drain.
		if t := f.drained(); t.IsZero() {
			b.WriteString("; the drain of owed bytes: no receiver acknowledged any")
		} else {
			fmt.Fprintf(&b, "; the drain of owed bytes: last acknowledged %v ago", time.Since(t).Round(time.Millisecond))
		}
	}
	if drops, err := u.e.dp.Drops(); err == nil && u.drops0 != nil {
		var grew []string
		for _, r := range slices.Sorted(maps.Keys(drops)) {
			if n := drops[r] - u.drops0.by[r]; n > 0 {
				grew = append(grew, fmt.Sprintf("%s %d", r, n))
			}
		}
		if len(grew) == 0 {
			grew = append(grew, "nothing")
		}
		fmt.Fprintf(&b, "; dropped since %v before the splice began: %s", u.start.Sub(u.drops0.at).Round(time.Millisecond), strings.Join(grew, ", "))
	}
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		from, short := u.unacknowledged(st, d)
		if !short {
			continue
		}
		k, err := u.e.dp.Kept(u.spec.A, d)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "; kept %v from the receiver's ack:", d)
		for i, seg := range k.Segs {
			if i == 8 {
				fmt.Fprintf(&b, " and %d more", len(k.Segs)-i)
				break
			}
			fmt.Fprintf(&b, " %+d..%+d", int32(seg.Seq-from), int32(seg.Seq-from)+int32(len(seg.Data)))
		}
	}
	return b.String()
}

// dropsReading is the program's drop counters at a time.
type dropsReading struct {
	at time.Time
	by map[string]uint64
}

// dropsReadEvery bounds how often recentDrops reads the counters (a map
// lookup per reason): a splice that may unsplice takes the latest
// reading, at most this old, and not a reading of its own.
const dropsReadEvery = time.Second

// recentDrops returns a reading of the drop counters at most
// dropsReadEvery old, reading them again if the last one is older.
func (e *Engine) recentDrops() *dropsReading {
	if r := e.counts.unsplices.drops.Load(); r != nil && time.Since(r.at) < dropsReadEvery {
		return r
	}
	by, err := e.dp.Drops()
	if err != nil {
		return nil
	}
	r := &dropsReading{at: time.Now(), by: by}
	e.counts.unsplices.drops.Store(r)
	return r
}

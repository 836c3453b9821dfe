// Taking a range port again while its pair is in the datapath's TIME_WAIT, as the kernel's tcp_tw_reuse does: once the pair has been quiet a second and the new connection's SYN carries a TSval newer than any the server saw from the pair.

package ip

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/ports"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
	"github.com/splicer/splicer/internal/sockopt"
)

const (
	// reuseQuiet is how long both directions of an ended pair must have
	// been quiet before its 4-tuple serves a new connection: no segment
	// of the old connection is then still on its way (tcp_tw_reuse's
	// second).
	reuseQuiet = time.Second
	// reuseTries bounds the ended pairs one pick looks at.
	reuseTries = 8
)

// portReuse keeps, per server, the pairs dialled from the range that
// ended (TIME_WAIT or reset), so that a pick finding every port of the
// range busy toward a server can take the port of one of them (reclaim).
// The kernel's timestamp offset of each pair's 4-tuple, read as its
// upstream connection was dialled (dialledClock), is the allocator's
// Note of the port.
type portReuse struct {
	// timeWait is how long the datapath keeps an ended pair: older
	// entries of ended are gone from the table.
	timeWait time.Duration
	// mu guards ended. Lock order: mu, then the datapath's table, then
	// the allocator (reclaim runs RemoveEnded under mu).
	mu sync.Mutex
	// ended are, per server, the B tuples of ended range pairs, oldest
	// first.
	ended map[netip.AddrPort]*endedQueue
	// reused counts the ports taken again ("local_ports_reused").
	reused atomic.Uint64
}

type endedPair struct {
	b  datapath.Tuple
	at time.Duration // datapath.Now when the end was noted
}

// endedQueue is one server's ended pairs, oldest first: q[head:]. Picks
// take from its front, where a reclaim finds the pairs quiet longest, so
// the front moves by an index: at thousands of new pairs a second the
// queue holds as many pairs as the range has ports, and moving them all
// down at each pick cost more than the rest of the pick.
type endedQueue struct {
	q    []endedPair
	head int
}

func (q *endedQueue) len() int { return len(q.q) - q.head }

// at is the i-th oldest pair.
func (q *endedQueue) at(i int) endedPair { return q.q[q.head+i] }

func (q *endedQueue) push(p endedPair) { q.q = append(q.q, p) }

// remove takes out the i-th oldest pair, moving the i older ones up.
func (q *endedQueue) remove(i int) {
	copy(q.q[q.head+1:], q.q[q.head:q.head+i])
	q.q[q.head] = endedPair{}
	q.head++
	q.compact()
}

// dropOlder takes out the pairs noted before cut.
func (q *endedQueue) dropOlder(cut time.Duration) {
	for q.len() > 0 && q.at(0).at < cut {
		q.q[q.head] = endedPair{}
		q.head++
	}
	q.compact()
}

// compact moves the pairs to the front of the array once half of it is
// taken, so that appends reuse the space: each pair is moved at most
// once per time the array fills.
func (q *endedQueue) compact() {
	if q.head < len(q.q)/2 {
		return
	}
	n := copy(q.q, q.q[q.head:])
	clear(q.q[n:])
	q.q, q.head = q.q[:n], 0
}

func newPortReuse(timeWait time.Duration) *portReuse {
	if timeWait <= 0 {
		timeWait = 60 * time.Second // datapath.Options' default
	}
	return &portReuse{timeWait: timeWait, ended: make(map[netip.AddrPort]*endedQueue)}
}

// noteEnded queues the range pair b, which the datapath reports in
// TIME_WAIT or reset, for its server's picks.
func (r *portReuse) noteEnded(b datapath.Tuple, now time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := serverKey(b.Src)
	q := r.ended[s]
	if q == nil {
		q = &endedQueue{}
		r.ended[s] = q
	}
	q.push(endedPair{b: b, at: now})
}

// prune drops the ended pairs that the sweep has removed by now (older
// than the TIME_WAIT), at every sweep.
func (r *portReuse) prune(now time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, q := range r.ended {
		q.dropOlder(now - r.timeWait)
		if q.len() == 0 {
			delete(r.ended, s)
		}
	}
}

// reclaim frees a port of the range toward server, for a pick that
// found them all busy: it removes from dp the oldest ended pair toward
// server whose 4-tuple a new connection may take (reusable), which
// unclaims its port in a, and reports whether it did. The pair's flows
// are out of the table before the port is handed out, so the new
// connection's segments reach its socket untranslated.
func (r *portReuse) reclaim(dp *datapath.Datapath, a *ports.Allocator, server netip.AddrPort) bool {
	server = serverKey(server)
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.ended[server]
	if q == nil {
		return false
	}
	defer r.dropEmpty(server, q)
	now := datapath.Now()
	for i, tries := 0, 0; i < q.len() && tries < reuseTries; tries++ {
		c := q.at(i)
		off, known := a.NoteOf(c.b.Src, c.b.Dst.Port())
		var later bool // safe some time from now: keep it queued
		removed, err := dp.RemoveEnded(c.b, func(spec datapath.PairSpec, st datapath.PairStats) bool {
			ok, wait := reusable(spec, st, now, off, known)
			later = wait
			return ok
		})
		if removed {
			q.remove(i)
			r.reused.Add(1)
			return true
		}
		if errors.Is(err, datapath.ErrClosed) {
			break
		}
		if err == nil && later {
			i++ // safe some time from now: kept
			continue
		}
		q.remove(i) // gone, or never safe: it waits out its TIME_WAIT
	}
	return false
}

// serverKey is s with an IPv4-mapped address unmapped, as the pairs'
// tuples have it.
func serverKey(s netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(s.Addr().Unmap(), s.Port())
}

// dropEmpty forgets server's queue q once it is empty.
func (r *portReuse) dropEmpty(server netip.AddrPort, q *endedQueue) {
	if q.len() == 0 {
		delete(r.ended, server)
	}
}

// reusable reports whether a new connection from the forwarder may take
// the 4-tuple of the ended pair spec at now (ok), or may some time from
// now (wait), as the kernel's tcp_twsk_unique decides for its own
// TIME_WAIT sockets:
//
//   - both directions quiet for reuseQuiet, so no segment of the old
//     connection is still on its way;
//   - the upstream connection carried timestamps (a server tells a new
//     SYN from the old connection's segments by its TSval: in TIME_WAIT
//     it takes a SYN whose TSval is newer than the last it saw,
//     tcp_timewait_state_process; without timestamps only by a sequence
//     number past the old one, which the kernel's ISN does not promise);
//   - the new SYN's TSval, CLOCK_MONOTONIC in ms plus off (the kernel's
//     offset for the 4-tuple, secure_tcp_ts_off, read as the old
//     connection was dialled: dialledClock; on this 6.18 kernel it
//     differs per 4-tuple, on older ones per address pair; either way a
//     new connection on the same 4-tuple gets the same), is newer than
//     the last TSval the server
//     saw from the pair: the client's latest, translated by TSOff (which
//     made it continue the forwarder's socket's clock, ahead of it by the
//     lead and the client's idle time at the splice). Anything the
//     server got from the pair went through the datapath or came from
//     the forwarder's socket before the splice, whose clock the
//     translated one starts ahead of.
func reusable(spec datapath.PairSpec, st datapath.PairStats, now time.Duration, off ports.Note, known bool) (ok, wait bool) {
	if spec.Up.StripTS || st.Up.TSLast == 0 || !known || off.Flag {
		return false, false
	}
	if now-max(st.Up.LastSeen, st.Down.LastSeen) < reuseQuiet {
		return false, true
	}
	next := uint32(now/time.Millisecond) + off.V
	last := st.Up.TSLast + spec.Up.TSOff
	if int32(next-last) <= 0 {
		return false, true // the translated clock ran ahead: later
	}
	return true, false
}

// dialledClock reads the kernel's timestamp offset of c, a connection
// just dialled (so with the kernel's offset, not one an unsplice set):
// its TCP_TIMESTAMP (CLOCK_MONOTONIC in ms plus the offset) less
// CLOCK_MONOTONIC in ms read just after, so never above the offset.
// Flag: microsecond timestamps, or none could be read (never reused).
func dialledClock(c *net.TCPConn) ports.Note {
	ts, err := tcprepair.TSClock(c)
	if err != nil {
		return ports.Note{Flag: true}
	}
	return ports.Note{V: ts - uint32(datapath.Now()/time.Millisecond), Flag: usecTS(c)}
}

// usecTS reports whether c's timestamps tick in microseconds (a route
// with the tcp_usec_ts feature), or whether that cannot be read.
func usecTS(c *net.TCPConn) bool {
	usec := true
	sockopt.WithFD(c, func(fd int) error {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			usec = info.Options&tcpiOptUsecTS != 0
		}
		return err
	})
	return usec
}

// tcpiOptUsecTS is TCPI_OPT_USEC_TS (Linux 6.7).
const tcpiOptUsecTS = 64

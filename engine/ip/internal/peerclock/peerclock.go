// Loading the peerclock program and running it on demand: one run reads, from a pair of the forwarder's TCP sockets, the latest TSval each accepted from its peer, and the sequence numbers, queues and windows a splice needs.

package peerclock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// Reader runs the peerclock program. Its methods are safe for concurrent
// use.
type Reader struct {
	objs peerclockObjects
}

// Load loads the program. Its error says what is missing: CAP_BPF and
// CAP_PERFMON, the kernel's BTF, or a field of struct tcp_sock.
func Load() (*Reader, error) {
	r := &Reader{}
	if err := loadPeerclockObjects(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("peerclock: load (needs CAP_BPF, CAP_PERFMON and the kernel's BTF): %w", err)
	}
	return r, nil
}

// Close unloads the program.
func (r *Reader) Close() error { return r.objs.Close() }

// Conn names one of the forwarder's sockets.
type Conn struct {
	// Local is the forwarder's address and port, Remote the peer's.
	Local, Remote netip.AddrPort
}

// Sock is what the program read from one socket.
type Sock struct {
	// Found: a full TCP socket has the connection's 4-tuple in the
	// calling thread's network namespace; nothing else is set otherwise.
	Found bool
	// State is its TCP state (TCP_ESTABLISHED is 1, TCP_CLOSE_WAIT 8).
	State uint8
	// TSRecent is tp->rx_opt.ts_recent: the latest TSval the socket
	// accepted from its peer (updated only by segments that passed the
	// sequence and PAWS checks). Valid if Stamped.
	TSRecent uint32
	// Stamped: ts_recent was ever stored (its stamp is not 0); Age is how
	// long ago, in whole seconds.
	Stamped bool
	Age     time.Duration
	// RcvNxt and WriteSeq are tp->rcv_nxt and tp->write_seq.
	RcvNxt, WriteSeq uint32
	// OutOfOrder: segments past a hole wait in the socket's
	// out-of-order queue. Its peer has them acknowledged selectively
	// (SACK) and will not send them again soon; no socket option, and
	// so no TCP_REPAIR, reads them.
	OutOfOrder bool
	// The rest of what a splice reads from a frozen socket: Seqs and
	// Window put it as the socket options would.
	copiedSeq, sndUna uint32
	mssClamp, urgData uint16
	window            tcprepair.Window
	tsOffset          uint32
	now               time.Duration // CLOCK_MONOTONIC when read
}

// tcpCloseWait is TCP_CLOSE_WAIT: the peer's FIN received, none sent.
const tcpCloseWait = 8

// Seqs returns what TCP_QUEUE_SEQ, SIOCINQ, SIOCOUTQ and TCP_MAXSEG would
// report of the socket, or false where SIOCINQ would count otherwise
// (urgent data pending), for the caller to ask the socket. SIOCINQ does
// not count a FIN received: in CLOSE_WAIT, the one state besides
// ESTABLISHED a splice takes, rcv_nxt is one past it until the proxy
// reads the end of the stream.
func (s Sock) Seqs() (tcprepair.Seqs, bool) {
	if !s.Found || s.urgData != 0 {
		return tcprepair.Seqs{}, false
	}
	inq := s.RcvNxt - s.copiedSeq
	if inq > 0 && s.State == tcpCloseWait {
		inq--
	}
	return tcprepair.Seqs{
		WriteSeq: s.WriteSeq,
		RcvNxt:   s.RcvNxt,
		InQ:      int(inq),
		OutQ:     int(s.WriteSeq - s.sndUna),
		MSSClamp: s.mssClamp,
	}, true
}

// TSClock returns the socket's timestamp clock when the program read it:
// CLOCK_MONOTONIC in milliseconds (microseconds with usecTS) plus its
// offset, the TSval a segment sent then would carry. TCP_TIMESTAMP reports
// the same but for its lowest bit, which since Linux 6.7 tells the unit.
func (s Sock) TSClock(usecTS bool) uint32 {
	unit := time.Millisecond
	if usecTS {
		unit = time.Microsecond
	}
	return uint32(s.now/unit) + s.tsOffset
}

// Window returns what TCP_REPAIR_WINDOW would report of the socket.
func (s Sock) Window() tcprepair.Window { return s.window }

// CurrentNetns, as Read's netns, is the calling thread's namespace.
const CurrentNetns = -1

// NetnsID returns ns's id in the calling thread's namespace, for Read,
// giving it one if it has none (as "ip netns set NAME auto" does; the id
// lasts as long as both namespaces).
func NetnsID(ns netns.NsHandle) (int32, error) {
	id, err := netlink.GetNetNsIdByFd(int(ns))
	if err == nil && id < 0 {
		const auto = -1 // NETNSA_NSID_NOT_ASSIGNED: the kernel picks
		if err = netlink.SetNetNsIdByFd(int(ns), auto); err == nil {
			id, err = netlink.GetNetNsIdByFd(int(ns))
		}
	}
	if err == nil && id < 0 {
		err = errors.New("peerclock: the namespace has no id")
	}
	return int32(id), err
}

// Read reads both sockets in one run of the program. They are in netns:
// the calling thread's namespace (CurrentNetns), or one whose id (a
// netnsid) the calling thread's namespace knows.
func (r *Reader) Read(conns [2]Conn, netns int32) ([2]Sock, error) {
	var q peerclockPeerclockQuery
	q.Netns = netns
	for i, c := range conns {
		if err := setTuple(&q.Sock[i], c); err != nil {
			return [2]Sock{}, err
		}
	}
	ret, err := r.run(&q)
	if err != nil {
		return [2]Sock{}, fmt.Errorf("peerclock: run: %w", err)
	}
	if ret != 0 { // TC_ACT_OK
		return [2]Sock{}, fmt.Errorf("peerclock: the program answered %d", ret)
	}
	now := time.Duration(q.NowNs)
	var out [2]Sock
	for i, s := range q.Sock {
		if s.Found == 0 {
			continue
		}
		out[i] = Sock{
			Found:      true,
			State:      uint8(s.State),
			TSRecent:   s.TsRecent,
			Stamped:    s.TsRecentStamp != 0,
			RcvNxt:     s.RcvNxt,
			WriteSeq:   s.WriteSeq,
			OutOfOrder: s.OutOfOrder != 0,

			copiedSeq: s.CopiedSeq,
			sndUna:    s.SndUna,
			mssClamp:  s.MssClamp,
			urgData:   s.UrgData,
			window:    tcprepair.Window{SndWl1: s.SndWl1, SndWnd: s.SndWnd, MaxWindow: s.MaxWindow, RcvWnd: s.RcvWnd, RcvWup: s.RcvWup},
			tsOffset:  s.Tsoffset,
			now:       now,
		}
		if out[i].Stamped {
			out[i].Age = max(0, now.Truncate(time.Second)-time.Duration(s.TsRecentStamp)*time.Second)
		}
	}
	return out, nil
}

// setTuple writes c's 4-tuple as a segment from the peer carries it.
func setTuple(s *peerclockPeerclockSock, c Conn) error {
	local, remote := c.Local.Addr().Unmap(), c.Remote.Addr().Unmap()
	t := (*[36]byte)(unsafe.Pointer(&s.Tuple))
	switch {
	case local.Is4() && remote.Is4():
		s.Family = uint32(peerclockPeerclockFamilyPEERCLOCK_AF_INET)
		sa, da := remote.As4(), local.As4()
		copy(t[0:], sa[:])
		copy(t[4:], da[:])
		binary.BigEndian.PutUint16(t[8:], c.Remote.Port())
		binary.BigEndian.PutUint16(t[10:], c.Local.Port())
	case local.Is6() && remote.Is6():
		s.Family = uint32(peerclockPeerclockFamilyPEERCLOCK_AF_INET6)
		sa, da := remote.As16(), local.As16()
		copy(t[0:], sa[:])
		copy(t[16:], da[:])
		binary.BigEndian.PutUint16(t[32:], c.Remote.Port())
		binary.BigEndian.PutUint16(t[34:], c.Local.Port())
	default:
		return errors.New("peerclock: " + c.Local.String() + " and " + c.Remote.String() + " are not one address family")
	}
	return nil
}

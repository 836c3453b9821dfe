// Rebuilding one of the forwarder's frozen sockets in place with TCP_REPAIR: same descriptor, new sequence numbers, options and windows, so the proxy's *net.TCPConn carries on after an unsplice.

package tcprepair

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Constants of linux/tcp.h that x/sys lacks.
const (
	// TCP_REPAIR_OPTIONS codes (the TCP option kinds).
	tcpoptMSS       = 2
	tcpoptWindow    = 3
	tcpoptSACKPerm  = 4
	tcpoptTimestamp = 8
)

// Rebuild is what a frozen socket becomes: the connection as the peer
// sees it after the datapath forwarded it for a while.
type Rebuild struct {
	Local, Remote netip.AddrPort
	// SndSeq is snd_nxt = write_seq: the peer acknowledged everything
	// sent to it. RcvSeq is rcv_nxt before queued, which goes into the
	// receive queue for the proxy to read (bytes the datapath kept back
	// at the boundary).
	SndSeq, RcvSeq uint32
	Queued         []byte
	// InFlight puts the last InFlight bytes before SndSeq (0 or 1) back
	// in flight, as if just sent: snd_una = SndSeq - InFlight. The peer
	// has them already (it acknowledged SndSeq), so its next ACK, or its
	// immediate answer to a copy of them (RTTProbe), acknowledges them
	// and gives the socket its first RTT sample at once: TCP_REPAIR can
	// set no RTT, and without a sample the socket's retransmission
	// timeout stays at the initial one (1 s, or 3 s from
	// tcp_init_metrics when the route has no cached RTT). Their content
	// is never read: a receiver discards bytes it already has.
	InFlight int
	// Options as negotiated at the handshake (read when frozen).
	PeerMSS              uint16
	WScale               bool
	SndWScale, RcvWScale uint8
	SACK, Timestamps     bool
	// TSClock is the TSval the socket's next segment carries: at least
	// the last one the datapath sent the peer in its name.
	TSClock uint32
	// SndWnd is the peer's latest window in bytes; MaxWindow the largest
	// it offered; RcvWnd the window the socket advertises.
	SndWnd, MaxWindow, RcvWnd uint32
}

// RebuildSock turns the frozen socket fd, still in repair mode, into the
// connection r describes. It disconnects the socket without a trace
// (tcp_disconnect in repair mode sends no reset; it only sets
// ECONNABORTED, which SO_ERROR clears), sets both queues' sequence
// numbers, binds it to its old address (repair mode forces the reuse of a
// listener's port) and connects it, which in repair mode goes straight to
// ESTABLISHED without a SYN; then options, clock, queued bytes and
// windows. The socket stays in repair mode: the caller leaves it when the
// pair is out of the datapath. queued is how much of r.Queued the receive
// queue took (FillRecvQueue): rcv_nxt is r.RcvSeq + queued.
func RebuildSock(fd int, r Rebuild) (queued int, err error) {
	if err := disconnect(fd); err != nil {
		return 0, fmt.Errorf("disconnect: %w", err)
	}
	called("getsockopt")
	unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR) // clears ECONNABORTED
	// The receive queue's first: the send queue stays selected for the
	// in-flight bytes (fillQueue).
	if err := setQueueSeq(fd, RecvQueue, r.RcvSeq); err != nil {
		return 0, fmt.Errorf("receive queue seq: %w", err)
	}
	if err := setQueueSeq(fd, SendQueue, r.SndSeq-uint32(r.InFlight)); err != nil {
		return 0, fmt.Errorf("send queue seq: %w", err)
	}
	kept, err := rebind(fd, r.Local)
	if err != nil {
		return 0, fmt.Errorf("bind %v: %w", r.Local, err)
	}
	if err := clampMSS(fd, r.PeerMSS); err != nil {
		return 0, fmt.Errorf("TCP_MAXSEG: %w", err)
	}
	called("connect")
	if err := unix.Connect(fd, sockaddr(r.Remote)); err != nil {
		return 0, fmt.Errorf("connect %v: %w", r.Remote, err)
	}
	if err := setRepairOptions(fd, r); err != nil {
		return 0, fmt.Errorf("TCP_REPAIR_OPTIONS: %w", err)
	}
	if r.Timestamps {
		if err := setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP, int(int32(r.SetClock()))); err != nil {
			return 0, fmt.Errorf("TCP_TIMESTAMP: %w", err)
		}
	}
	if err := fillSendQueue(fd, r.InFlight); err != nil {
		return 0, fmt.Errorf("send queue: %w", err)
	}
	queued, err = FillRecvQueue(fd, r.Queued)
	if err != nil {
		return 0, fmt.Errorf("receive queue: %w", err)
	}
	rcvNxt := r.RcvSeq + uint32(queued)
	w := Window{SndWl1: r.RcvSeq, SndWnd: r.SndWnd, MaxWindow: max(r.MaxWindow, r.SndWnd), RcvWnd: r.RcvWnd, RcvWup: rcvNxt}
	if err := setRepairWindow(fd, w); err != nil {
		return 0, fmt.Errorf("TCP_REPAIR_WINDOW: %w", err)
	}
	if kept {
		return queued, checkLocal(fd, r.Local)
	}
	return queued, nil
}

// calls, if set, is told of every system call RebuildSock makes, by name
// (tests count them).
var calls func(name string)

func called(name string) {
	if calls != nil {
		calls(name)
	}
}

func setsockoptInt(fd, level, opt, v int) error {
	called("setsockopt")
	return unix.SetsockoptInt(fd, level, opt, v)
}

// SetClock is the clock RebuildSock gives the socket: TSClock rounded up
// to even, since the value's low bit selects microsecond timestamps (Linux
// 6.7); rounding up keeps PAWS. The socket's TSvals start there: its
// TCP_TIMESTAMP read within the same millisecond returns it.
func (r Rebuild) SetClock() uint32 { return (r.TSClock + 1) &^ 1 }

// clampMSS sets the socket's user MSS to the peer's before the repair
// connect: connect sizes segments (mss_cache) from the route and the MSS
// clamp known then, and TCP_REPAIR_OPTIONS later only moves the clamp, so a
// socket with no user MSS (an accepted one) would send 536-byte segments
// in control mode after unsplicing.
func clampMSS(fd int, peerMSS uint16) error {
	if peerMSS < 88 { // TCP_MIN_MSS: unknown, keep the route's
		return nil
	}
	return setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, int(peerMSS))
}

// disconnect is connect(AF_UNSPEC): tcp_disconnect, which in repair mode
// sends nothing, purges both queues and takes the socket out of the
// established table.
func disconnect(fd int) error {
	called("connect")
	var sa [16]byte // struct sockaddr, sa_family AF_UNSPEC
	_, _, errno := syscall.Syscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa[0])), uintptr(len(sa)))
	if errno != 0 {
		return errno
	}
	return nil
}

// setQueueSeq selects queue (TCP_REPAIR_QUEUE), which stays selected,
// and sets its sequence number.
func setQueueSeq(fd, queue int, seq uint32) error {
	if err := setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); err != nil {
		return err
	}
	return setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ, int(int32(seq)))
}

// rebind binds fd to its old address. A socket whose port survived the
// disconnect (bound by the user before: SOCK_BINDPORT_LOCK) refuses a
// second bind with EINVAL and keeps its port (kept): checkLocal then
// verifies its address, which the repair connect may have taken from the
// route. A socket bound here keeps local: connect changes neither the
// bound address nor the port.
func rebind(fd int, local netip.AddrPort) (kept bool, err error) {
	called("bind")
	err = unix.Bind(fd, sockaddr(local))
	if errors.Is(err, unix.EINVAL) {
		return true, nil
	}
	return false, err
}

// checkLocal makes sure the rebuilt connection has its old local address:
// the peer knows no other. It calls getsockname itself: unix.Getsockname
// asks every IPv4 socket its SO_PROTOCOL too (for L2TP), a second system
// call.
func checkLocal(fd int, want netip.AddrPort) error {
	called("getsockname")
	var rsa unix.RawSockaddrAny
	l := uint32(unix.SizeofSockaddrAny)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&l))); errno != 0 {
		return errno
	}
	var got netip.AddrPort
	switch rsa.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		got = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), portOf(a.Port))
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa))
		got = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), portOf(a.Port))
	}
	if got != want {
		return fmt.Errorf("rebuilt with local address %v, not %v", got, want)
	}
	return nil
}

// portOf is a port as a raw sockaddr holds it (network order).
func portOf(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// setRepairOptions restores the options negotiated at the handshake,
// which tcp_disconnect forgot: the peer's MSS, window scales, SACK and
// timestamps.
func setRepairOptions(fd int, r Rebuild) error {
	type opt struct{ code, val uint32 }
	opts, n := [4]opt{{tcpoptMSS, uint32(r.PeerMSS)}}, 1 // in one call: the kernel takes an array
	if r.WScale {
		opts[n], n = opt{tcpoptWindow, uint32(r.SndWScale) | uint32(r.RcvWScale)<<16}, n+1
	}
	if r.SACK {
		opts[n], n = opt{tcpoptSACKPerm, 0}, n+1
	}
	if r.Timestamps {
		opts[n], n = opt{tcpoptTimestamp, 0}, n+1
	}
	called("setsockopt")
	_, _, errno := syscall.Syscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR_OPTIONS,
		uintptr(unsafe.Pointer(&opts[0])), uintptr(n*8), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// FillRecvQueue appends to the receive queue of a socket in repair mode
// (a send with TCP_REPAIR_QUEUE = TCP_RECV_QUEUE) as much of b as its
// receive memory takes, advancing rcv_nxt past it, and returns how many
// bytes that was: the proxy reads them as if they had arrived. A full
// socket (ENOBUFS or ENOMEM: tcp_send_rcvq found no room under
// SO_RCVBUF) is no error. The bytes left out are ones the peer sent and
// the socket never acknowledged: the peer sends them again.
func FillRecvQueue(fd int, b []byte) (int, error) {
	n, err := fillQueue(fd, RecvQueue, b)
	if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
		return n, nil
	}
	return n, err
}

// fillSendQueue puts n bytes in the send queue of a socket in repair
// mode as sent, not acknowledged: nothing is transmitted, snd_nxt moves
// past them, the retransmission timer starts, and their send time is
// now. The send queue is selected already (RebuildSock sets its seq
// last); their content is never read (Rebuild.InFlight).
func fillSendQueue(fd, n int) error {
	var b [1]byte
	for n > 0 {
		called("write")
		w, err := unix.Write(fd, b[:min(n, len(b))])
		if err != nil {
			return err
		}
		n -= w
	}
	return nil
}

// fillQueue writes b into queue (TCP_REPAIR_QUEUE) of a socket in repair
// mode and returns how many bytes went in; nothing, not even the queue's
// selection, when b is empty. The queue stays selected: every fill
// selects its own (the in-flight bytes of RebuildSock go to the send
// queue its sequence number selected), nothing else the engine does in
// repair mode reads the selection, and leaving repair mode (or entering it again) makes it
// irrelevant (a write outside repair mode goes to the send queue as
// always; TCP_REPAIR_ON selects no queue). Deselecting after each fill
// cost a system call for nothing.
func fillQueue(fd, queue int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if err := setsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); err != nil {
		return 0, err
	}
	done := 0
	for done < len(b) {
		called("write")
		n, err := unix.Write(fd, b[done:])
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func setRepairWindow(fd int, w Window) error {
	buf := [5]uint32{w.SndWl1, w.SndWnd, w.MaxWindow, w.RcvWnd, w.RcvWup}
	called("setsockopt")
	_, _, errno := syscall.Syscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW,
		uintptr(unsafe.Pointer(&buf[0])), unsafe.Sizeof(buf), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// LeaveRepair takes a rebuilt socket out of repair mode. With probe it
// sends a window probe: a bare ACK that tells the peer the new rcv_nxt
// (bytes the datapath kept are acknowledged at once) and window, which
// the peer answers. Without, the caller tells the peer itself (the
// engine's RTT probe carries the same ack and window and draws the same
// answer): each probe costs a segment each way, sent and received inside
// the system call that sends it.
func LeaveRepair(fd int, probe bool) error {
	if probe {
		return repairOff(fd, unix.TCP_REPAIR_OFF)
	}
	return repairOff(fd, unix.TCP_REPAIR_OFF_NO_WP)
}

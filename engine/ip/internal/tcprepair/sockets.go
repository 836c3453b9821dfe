// Package tcprepair freezes the forwarder's sockets with TCP_REPAIR, reads what splicing needs from them (sequence numbers, options, queues, windows, clocks), thaws them, and rebuilds a frozen socket in place for an unsplice.
//
// It also hands out the grace periods (Graces) after which every segment
// already past tc ingress has reached its socket.
package tcprepair

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// State is what splicing needs from one of the forwarder's sockets,
// read while it is frozen.
type State struct {
	Params ConnParams
	// InQ and OutQ are the bytes in the receive queue (received, not read
	// by the proxy) and in the send queue (written, not acknowledged).
	InQ, OutQ int
	// Established: the socket is in TCP_ESTABLISHED (no FIN either way)
	// or TCP_CLOSE_WAIT (FINReceived: the peer's FIN is in rcv_nxt).
	Established, FINReceived bool
	// TCPState is tcpi_state, for messages.
	TCPState uint8
	// UsecTS: the connection's timestamps tick in microseconds.
	UsecTS bool
	// RTT is the smoothed round-trip time.
	RTT time.Duration
	// SndMSS is the payload the socket puts in a full segment (its
	// mss_cache: the peer's MSS and the path MTU, options taken off).
	SndMSS int
	// SndNxt is the socket's snd_nxt: write_seq less the bytes not yet
	// sent (tcpi_notsent_bytes). The peer's rcv_wup is at most this, so
	// a segment with this seq is in its window.
	SndNxt uint32
	// notSent is tcpi_notsent_bytes (write_seq - snd_nxt).
	notSent uint32
}

// Constants of linux/tcp.h that x/sys lacks.
const (
	RecvQueue = 1 // TCP_RECV_QUEUE
	SendQueue = 2 // TCP_SEND_QUEUE

	tcpiOptTimestamps = 1
	tcpiOptSACK       = 2
	tcpiOptWScale     = 4
	tcpiOptECN        = 8
	// tcpiOptUsecTS: microsecond timestamps (Linux 6.7).
	tcpiOptUsecTS = 64
	// tcpEstablished and tcpCloseWait are TCP_ESTABLISHED and
	// TCP_CLOSE_WAIT (the peer's FIN received, none sent) of tcpi_state.
	tcpEstablished = 1
	tcpCloseWait   = 8
)

// Addrs returns c's local and remote addresses, IPv4-mapped ones unmapped.
func Addrs(c *net.TCPConn) (local, remote netip.AddrPort, err error) {
	l, lok := c.LocalAddr().(*net.TCPAddr)
	r, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok || l == nil || r == nil {
		return local, remote, errors.New("connection has no TCP addresses (closed?)")
	}
	lap, rap := l.AddrPort(), r.AddrPort()
	return netip.AddrPortFrom(lap.Addr().Unmap(), lap.Port()), netip.AddrPortFrom(rap.Addr().Unmap(), rap.Port()), nil
}

// NetnsInode returns the inode of the network namespace c belongs to.
func NetnsInode(c *net.TCPConn) (ino uint64, err error) {
	err = sockopt.WithFD(c, func(fd int) error {
		nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
		if err != nil {
			return fmt.Errorf("SIOCGSKNS: %w", err)
		}
		defer unix.Close(nsfd)
		var st unix.Stat_t
		if err := unix.Fstat(nsfd, &st); err != nil {
			return err
		}
		ino = st.Ino
		return nil
	})
	return ino, err
}

// NetnsCookie returns the cookie of the network namespace c is in
// (SO_NETNS_COOKIE, Linux 5.14; one call where NetnsInode takes three).
func NetnsCookie(c *net.TCPConn) (cookie uint64, err error) {
	err = sockopt.WithFD(c, func(fd int) error {
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		return err
	})
	return cookie, err
}

// ErrMPTCP marks an MPTCP socket: its subflows' sequence numbers are not
// the socket's, and the kernel has no repair mode for it.
var ErrMPTCP = errors.New("an MPTCP socket: its subflows' sequence numbers are not the socket's")

// Freeze puts c in repair mode, in which it sends nothing, not even
// when closed, and reads its state. The caller thaws it or closes it.
func Freeze(c *net.TCPConn) (State, error) {
	return freeze(c, readFrozen)
}

// FreezeInfo is Freeze that reads only TCP_INFO: the caller completes
// the state with ApplySeqs, from a reading it made another way (one run
// of the peerclock program for both sockets of a pair), or with Reread.
func FreezeInfo(c *net.TCPConn) (State, error) {
	return freeze(c, readInfo)
}

// freeze puts c in repair mode and reads it with read.
func freeze(c *net.TCPConn, read func(fd int, s *State) error) (State, error) {
	var s State
	local, remote, err := Addrs(c)
	if err != nil {
		return s, err
	}
	s.Params.Local, s.Params.Remote = local, remote
	err = sockopt.WithFD(c, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_ON); err != nil {
			// TCP knows the option; MPTCP refuses it so (Linux 5.14
			// on): the one check of the protocol a splice makes.
			if errors.Is(err, unix.ENOPROTOOPT) {
				return ErrMPTCP
			}
			return fmt.Errorf("TCP_REPAIR (needs CAP_NET_ADMIN): %w", err)
		}
		return read(fd, &s)
	})
	return s, err
}

// Reread reads a frozen c's state again.
func Reread(c *net.TCPConn, s State) (State, error) {
	err := sockopt.WithFD(c, func(fd int) error { return readFrozen(fd, &s) })
	return s, err
}

// readFrozen reads a frozen socket's TCP_INFO and queues.
func readFrozen(fd int, s *State) error {
	if err := readInfo(fd, s); err != nil {
		return err
	}
	q, err := readSeqs(fd)
	if err == nil {
		s.ApplySeqs(q)
	}
	return err
}

// Seqs is what a frozen socket's queues say: its sequence numbers, the
// bytes queued each way, and the MSS its peer advertised.
type Seqs struct {
	// WriteSeq and RcvNxt are TCP_QUEUE_SEQ of the send and the receive
	// queue; InQ and OutQ what SIOCINQ and SIOCOUTQ report.
	WriteSeq, RcvNxt uint32
	InQ, OutQ        int
	// MSSClamp is TCP_MAXSEG in repair mode: the MSS the peer advertised
	// (capped by the socket's own TCP_MAXSEG).
	MSSClamp uint16
}

// ApplySeqs completes a state read by FreezeInfo (its TCP_INFO part) with
// the socket's queues.
func (s *State) ApplySeqs(q Seqs) {
	s.Params.WriteSeq, s.Params.RcvNxt = q.WriteSeq, q.RcvNxt
	s.InQ, s.OutQ = q.InQ, q.OutQ
	// SIOCOUTQ is write_seq - snd_una.
	s.Params.SndUna = q.WriteSeq - uint32(q.OutQ)
	s.SndNxt = q.WriteSeq - s.notSent
	s.Params.PeerMSS = q.MSSClamp
}

// SetTCPState sets the state from a reading (tcpi_state's numbering, the
// kernel's).
func (s *State) SetTCPState(st uint8) {
	s.TCPState = st
	s.Established = st == tcpEstablished || st == tcpCloseWait
	s.FINReceived = st == tcpCloseWait
}

// readSeqs reads a frozen socket's queues with socket options.
func readSeqs(fd int) (Seqs, error) {
	var q Seqs
	var err error
	if q.WriteSeq, err = queueSeq(fd, SendQueue); err != nil {
		return q, fmt.Errorf("send queue seq: %w", err)
	}
	if q.RcvNxt, err = queueSeq(fd, RecvQueue); err != nil {
		return q, fmt.Errorf("receive queue seq: %w", err)
	}
	if q.InQ, err = unix.IoctlGetInt(fd, unix.SIOCINQ); err != nil {
		return q, fmt.Errorf("SIOCINQ: %w", err)
	}
	if q.OutQ, err = unix.IoctlGetInt(fd, unix.SIOCOUTQ); err != nil {
		return q, fmt.Errorf("SIOCOUTQ: %w", err)
	}
	// In repair mode TCP_MAXSEG reports mss_clamp.
	mss, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil {
		return q, fmt.Errorf("TCP_MAXSEG: %w", err)
	}
	q.MSSClamp = uint16(mss)
	return q, nil
}

// readInfo reads state, options, MSS and RTT of a frozen socket from
// TCP_INFO.
func readInfo(fd int, s *State) error {
	info, err := rawTCPInfoOf(fd)
	if err != nil {
		return fmt.Errorf("TCP_INFO: %w", err)
	}
	// struct tcp_info: state at 0, options at 5, wscales at 6 (snd low
	// nibble, rcv high), snd_mss at 16, rtt (us) at 68, advmss at 84,
	// notsent_bytes at 144 (Linux 4.6).
	if len(info) < 148 {
		return fmt.Errorf("TCP_INFO: %d bytes", len(info))
	}
	s.SetTCPState(info[0])
	opts := info[5]
	s.Params.Timestamps = opts&tcpiOptTimestamps != 0
	s.Params.SACK = opts&tcpiOptSACK != 0
	s.Params.WScale = opts&tcpiOptWScale != 0
	s.Params.ECN = opts&tcpiOptECN != 0
	s.UsecTS = opts&tcpiOptUsecTS != 0
	if s.Params.WScale {
		s.Params.SndWScale, s.Params.RcvWScale = info[6]&0xf, info[6]>>4
	}
	s.RTT = time.Duration(le32(info[68:])) * time.Microsecond
	s.SndMSS = int(le32(info[16:]))
	s.Params.AdvMSS = uint16(le32(info[84:]))
	// A frozen socket sends nothing and the proxy writes nothing while
	// splicing: write_seq - snd_nxt holds until the queues are read.
	s.notSent = le32(info[144:])
	return nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// queueSeq reads rcv_nxt (TCP_RECV_QUEUE) or write_seq (TCP_SEND_QUEUE) of
// a frozen socket.
func queueSeq(fd, queue int) (uint32, error) {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); err != nil {
		return 0, err
	}
	v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
	return uint32(v), err
}

// RawTCPInfo returns fd's struct tcp_info as bytes (see rawTCPInfoOf),
// for tests that read its option and window-scale fields themselves.
func RawTCPInfo(fd int) ([]byte, error) { return rawTCPInfoOf(fd) }

// rawTCPInfoOf returns struct tcp_info as bytes: x/sys's TCPInfo hides the
// window-scale bitfields in its padding.
func rawTCPInfoOf(fd int) ([]byte, error) {
	buf := make([]byte, 256)
	l := uint32(len(buf))
	_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return nil, errno
	}
	return buf[:l], nil
}

// Thaw takes c out of repair mode without a window probe: the socket
// carries on as if it had never been frozen.
func Thaw(c *net.TCPConn) error {
	err := sockopt.WithFD(c, func(fd int) error { return repairOff(fd, unix.TCP_REPAIR_OFF_NO_WP) })
	// An MPTCP socket, which Freeze refused: never frozen.
	if errors.Is(err, unix.ENOPROTOOPT) {
		return nil
	}
	return err
}

// repairOff takes fd out of repair mode, with a window probe
// (TCP_REPAIR_OFF) or without (TCP_REPAIR_OFF_NO_WP), and sets
// SO_REUSEADDR again: the kernel clears it there (sk_reuse =
// SK_NO_REUSE). The engine's sockets want it: a client connection's port
// is its listener's, an upstream's is from the engine's own range, bound
// with it, or an ephemeral one nobody binds by hand. Without it, the
// socket's TIME_WAIT after this side closes keeps a restarted
// forwarder's listener (or the range's next upstream) off the port for a
// minute.
func repairOff(fd, mode int) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, mode); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR after repair: %w", err)
	}
	return nil
}

// Poke makes a frozen c send one window probe (a bare ACK one below
// snd_una) and freezes it again. The peer answers an old sequence number
// with an ACK carrying its current TSval, which the held pair records: the
// only way to learn a peer's timestamp clock without reading its socket.
// Nothing else leaves the socket: its queues are empty and the pair is
// held, so no segment reaches it meanwhile.
func Poke(c *net.TCPConn) error {
	return sockopt.WithFD(c, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF); err != nil {
			return fmt.Errorf("TCP_REPAIR off: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_ON); err != nil {
			return fmt.Errorf("TCP_REPAIR on: %w", err)
		}
		return nil
	})
}

// TSClock reads c's timestamp clock now (TCP_TIMESTAMP, the socket's
// offset included): the TSval its next segment would carry.
func TSClock(c *net.TCPConn) (v uint32, err error) {
	err = sockopt.WithFD(c, func(fd int) error {
		x, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_TIMESTAMP)
		v = uint32(x)
		return err
	})
	return v, err
}

// Graces hands out RCU grace periods to many splices at once. The receive
// path from tc ingress to the socket runs in one RCU read-side section, so
// once a grace period that began after a pair was inserted has ended,
// every segment that passed tc before the insert has reached its socket,
// and the queues read afterwards are final. A grace period (quiesce) takes
// microseconds to 10 ms, so splices share them: the first caller runs one
// on its own thread and releases, at its end, everyone who was waiting
// when it began; whoever came later waits for the next, which the first
// of them runs.
type Graces struct {
	// Quick, if set, is tried first: it reports true once every segment
	// that passed tc ingress before the call has reached its socket, or
	// false if it cannot tell, and the visit (quiesce) follows. Set it
	// before the first grace period.
	Quick func() bool

	mu      sync.Mutex
	running bool
	// waiting are the callers that came while a grace period ran; each
	// receives false when one that began after it came has ended, or
	// true to run the next one itself.
	waiting []chan bool
}

// Wait returns at the end of a grace period that began after Wait was
// called.
func (g *Graces) Wait() {
	g.mu.Lock()
	if !g.running {
		g.running = true
		g.mu.Unlock()
		g.lead()
		return
	}
	ch := make(chan bool, 1)
	g.waiting = append(g.waiting, ch)
	g.mu.Unlock()
	if <-ch {
		g.lead()
	}
}

// lead runs one grace period for the caller and those waiting when it
// begins, then hands the next to the first caller who came meanwhile.
func (g *Graces) lead() {
	g.mu.Lock()
	batch := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	quick := !softirqPreemptible() && g.Quick != nil && g.Quick()
	if !quick && !quiesce() {
		// No grace period to wait for: give segments already past tc
		// ingress a moment to reach their sockets.
		time.Sleep(5 * time.Millisecond)
	}
	for _, ch := range batch {
		ch <- false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.running = false
		return
	}
	next := g.waiting[0]
	g.waiting = g.waiting[1:]
	next <- true
}

// Start returns a channel closed at the end of a grace period that began
// after Start was called, for a caller with work to do meanwhile.
func (g *Graces) Start() <-chan struct{} {
	ch := make(chan struct{})
	g.mu.Lock()
	if !g.running {
		// Leading from another goroutine: the grace period still begins
		// after this call.
		g.running = true
		g.mu.Unlock()
		go func() {
			g.lead()
			close(ch)
		}()
		return ch
	}
	w := make(chan bool, 1)
	g.waiting = append(g.waiting, w)
	g.mu.Unlock()
	go func() {
		if <-w {
			g.lead()
		}
		close(ch)
	}()
	return ch
}

// PeekQueue appends to dst the n bytes of a frozen c's receive queue
// (bytes received and acknowledged, not read) or send queue (written, not
// acknowledged, from snd_una), read in repair mode without consuming
// them, and returns the extended slice. The caller's dst may come from a
// pool: a splice reads up to a window's worth per direction.
func PeekQueue(c *net.TCPConn, queue, n int, dst []byte) ([]byte, error) {
	if n == 0 {
		return dst, nil
	}
	dst = slices.Grow(dst, n)
	buf := dst[len(dst) : len(dst)+n]
	err := sockopt.WithFD(c, func(fd int) error {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); err != nil {
			return err
		}
		// The send queue is copied whole (a shorter buffer fails); the
		// receive queue in one call as long as the buffer holds it.
		got, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%d bytes queued, %d read", n, got)
		}
		return nil
	})
	return dst[:len(dst)+n], err
}

// Window is struct tcp_repair_window: the windows of a frozen
// socket, in bytes.
type Window struct {
	SndWl1, SndWnd, MaxWindow, RcvWnd, RcvWup uint32
}

// ReadWindow reads TCP_REPAIR_WINDOW of a frozen c.
func ReadWindow(c *net.TCPConn) (w Window, err error) {
	err = sockopt.WithFD(c, func(fd int) error {
		var buf [20]byte
		l := uint32(len(buf))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR_WINDOW,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
		if errno != 0 {
			return fmt.Errorf("TCP_REPAIR_WINDOW: %w", errno)
		}
		w = Window{le32(buf[0:]), le32(buf[4:]), le32(buf[8:]), le32(buf[12:]), le32(buf[16:])}
		return nil
	})
	return w, err
}

// Socket queries the sockmap engine needs: cookies, TCP byte counts, pending errors, readiness without consuming.

package sockmap

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
)

// cookie returns the socket cookie, the key of c in the engine's maps.
func cookie(c *net.TCPConn) (uint64, error) {
	var v uint64
	err := sockopt.WithFD(c, func(fd int) (err error) {
		v, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	return v, err
}

// canSend reports whether c may still send: established, or the peer
// half-closed; never shut down for writing nor reset.
func canSend(c *net.TCPConn) bool {
	ti, err := sockopt.TCPInfo(c)
	return err == nil && (ti.State == unix.BPF_TCP_ESTABLISHED || ti.State == unix.BPF_TCP_CLOSE_WAIT)
}

// streamPos returns how many bytes of c's incoming stream were consumed so
// far: received minus still queued. Only valid while nobody reads c and c is
// in no map (SIOCINQ counts the psock queue once it is).
func streamPos(c *net.TCPConn) (uint64, error) {
	for {
		a, err := sockopt.TCPInfo(c)
		if err != nil {
			return 0, err
		}
		q, err := engine.Readable(c)
		if err != nil {
			return 0, err
		}
		b, err := sockopt.TCPInfo(c)
		if err != nil {
			return 0, err
		}
		if a.Bytes_received == b.Bytes_received {
			return a.Bytes_received - uint64(q), nil
		}
	}
}

// written returns a lower bound of the bytes ever written into c's send
// queue: acknowledged bytes read before the unacknowledged ones, so an ACK in
// between can only make it smaller. Used to see a destination catch up.
func written(c *net.TCPConn) (uint64, error) {
	ti, err := sockopt.TCPInfo(c)
	if err != nil {
		return 0, err
	}
	q, err := engine.Unsent(c)
	if err != nil {
		return 0, err
	}
	return ti.Bytes_acked + uint64(q), nil
}

// writtenExact returns the bytes ever written into c's send queue while no
// one writes to c: it repeats until no ACK moved the count in between.
func writtenExact(c *net.TCPConn) (uint64, error) {
	for {
		a, err := sockopt.TCPInfo(c)
		if err != nil {
			return 0, err
		}
		q, err := engine.Unsent(c)
		if err != nil {
			return 0, err
		}
		b, err := sockopt.TCPInfo(c)
		if err != nil {
			return 0, err
		}
		if a.Bytes_acked == b.Bytes_acked {
			return a.Bytes_acked + uint64(q), nil
		}
	}
}

// soError takes c's pending socket error (SO_ERROR clears it).
func soError(c *net.TCPConn) syscall.Errno {
	var e int
	if err := sockopt.WithFD(c, func(fd int) (err error) {
		e, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		return err
	}); err != nil {
		return unix.EBADF
	}
	return syscall.Errno(e)
}

// readHup reports whether c received a FIN (without taking any lock that
// would divert incoming segments to the socket backlog).
func readHup(c *net.TCPConn) bool {
	var hup bool
	sockopt.WithFD(c, func(fd int) error {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(pfd, 0)
		hup = err == nil && n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
		return err
	})
	return hup
}

// peek reports whether c has something for the proxy to read: data, EOF
// (n == 0, err == nil) or an error other than EAGAIN.
func peek(c *net.TCPConn) (ready bool, err error) {
	var b [1]byte
	werr := sockopt.WithFD(c, func(fd int) error {
		_, _, err = unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return nil
	})
	if werr != nil {
		return true, werr
	}
	if errors.Is(err, unix.EAGAIN) {
		return false, nil
	}
	return true, err
}

// kick makes a socket that just entered rx_socks parse the bytes already in
// its receive queue: the kernel's receive path for parser sockets runs the
// stream parser when a read finds the TCP queue non-empty. Without it those
// bytes would wait for the next segment to arrive. It returns a pending
// reset, which the read took from the socket.
func kick(c *net.TCPConn) error {
	_, err := peek(c)
	return err
}

// Readiness helpers on TCP connections that go through Go's netpoller, so waits are cancellable by deadlines.

package engine

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// WaitReadable blocks until c has data, EOF or an error pending, without
// consuming anything. A read deadline on c interrupts it with
// os.ErrDeadlineExceeded.
func WaitReadable(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var b [1]byte
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		_, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return !errors.Is(perr, unix.EAGAIN)
	})
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	return nil
}

// Readable reports how many bytes are queued for reading on c (SIOCINQ).
func Readable(c *net.TCPConn) (int, error) {
	return ioctlInt(c, unix.SIOCINQ)
}

// Unsent reports how many bytes sit in c's send queue, sent or not, not yet
// acknowledged by the peer (SIOCOUTQ).
func Unsent(c *net.TCPConn) (int, error) {
	return ioctlInt(c, unix.SIOCOUTQ)
}

func ioctlInt(c *net.TCPConn, req uint) (n int, err error) {
	err = sockopt.WithFD(c, func(fd int) error {
		n, err = unix.IoctlGetInt(fd, req)
		return err
	})
	return n, err
}

// Listening sockets with SO_REUSEPORT, one per worker process, among which the kernel spreads new connections.

package sockopt

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenReusePort listens on addr with SO_REUSEPORT set, so that every
// worker of a master binds its own socket to the same address and the
// kernel (or an sk_reuseport program: internal/reuseport) gives each new
// connection to one of them.
func ListenReusePort(network, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	// Plain TCP: Go listens with MPTCP where the kernel has it, and a
	// reuseport group of MPTCP sockets takes no sk_reuseport program
	// (its socket array holds TCP and UDP sockets only: ENOTSUPP).
	lc.SetMultipathTCP(false)
	return lc.Listen(context.Background(), network, addr)
}

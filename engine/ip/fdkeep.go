// Keeping a duplicate of the forwarder's frozen upstream descriptor while its pair is spliced, for a pair whose local port is not from the engine's range (localports.go): the kernel then gives the port to no new connection to the same server.

package ip

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/internal/sockopt"
)

// keep duplicates up's descriptor for pair a. The duplicate stays frozen
// (it sends nothing, and its keepalive is off: a keepalive timeout would
// send a reset) and stays in the established table, so the kernel picks
// another port for new connections to the same server.
func (e *Engine) keep(a datapath.Tuple, up *net.TCPConn) error {
	var fd int
	err := sockopt.WithFD(up, func(ofd int) error {
		var err error
		if fd, err = unix.FcntlInt(uintptr(ofd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		unix.Close(fd)
		return nil
	}
	if old, ok := e.kept[a]; ok {
		unix.Close(old)
	}
	e.kept[a] = fd
	return nil
}

// release closes the descriptor kept for pair a, if any: the socket is
// still in repair mode, so closing sends nothing.
func (e *Engine) release(a datapath.Tuple) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(a)
}

func (e *Engine) releaseLocked(a datapath.Tuple) {
	if fd, ok := e.kept[a]; ok {
		unix.Close(fd)
		delete(e.kept, a)
	}
}

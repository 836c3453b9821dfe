// Holding the local port of a spliced pair that was not dialled from the engine's range (localports.go) once the forwarder's sockets are closed: reserved in the home namespace while the pair is in the table, or, where it cannot be, kept by a duplicate of the frozen upstream socket.

package ip

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/internal/sockopt"
)

// portHolds are the descriptors that hold ports, by A tuple: the pairs
// whose port neither the range nor the reservation keeps. Guarded by
// Engine.mu.
type portHolds map[datapath.Tuple]int

// holdPort keeps the local port of the pair spec, whose upstream socket
// up is about to be closed (or left frozen), from the kernel's picks for
// as long as the datapath holds the pair, so that no new connection to
// the same server takes its 4-tuple:
//
//   - a port of the engine's range is claimed already (the allocator
//     skips it toward that server);
//   - any other port was counted as the pair entered the table
//     (datapathOptions: ports.Reservation.Hold) and is now added to
//     ip_local_reserved_ports, in one write for all the splices that
//     wait for one (Sync): no descriptor per pair;
//   - where that cannot be (no range configured, the sysctl not
//     writable, the port reserved by someone else, or the kernel left
//     with too few ephemeral ports), a duplicate of up is kept.
func (e *Engine) holdPort(spec datapath.PairSpec, up *net.TCPConn) error {
	if e.portClaimed(spec.B) {
		return nil
	}
	if res := e.reserved.Load(); res != nil {
		err := res.Sync()
		if err == nil && res.Held(spec.B.Dst.Port()) {
			return nil
		}
		if err != nil && e.holdWarned.CompareAndSwap(false, true) {
			e.log.Warn("reserving the local ports of pairs dialled outside the range: each such pair keeps a descriptor instead", "err", err)
		}
	}
	return e.holdDescriptor(spec.A, up)
}

// holdDescriptor duplicates up's descriptor for pair a. The duplicate
// stays frozen (it sends nothing, and its keepalive is off: a keepalive
// timeout would send a reset) and stays in the established table, so the
// kernel picks another port for new connections to the same server.
func (e *Engine) holdDescriptor(a datapath.Tuple, up *net.TCPConn) error {
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
	if old, ok := e.portFDs[a]; ok {
		unix.Close(old)
	}
	e.portFDs[a] = fd
	e.portFDCount.Store(int64(len(e.portFDs)))
	return nil
}

// release lets go of what holds pair a's port, once the pair left the
// table (a reserved port is let go as it leaves: datapathOptions). A
// held descriptor is still in repair mode, so closing it sends nothing.
func (e *Engine) release(a datapath.Tuple) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(a)
}

func (e *Engine) releaseLocked(a datapath.Tuple) {
	if fd, ok := e.portFDs[a]; ok {
		unix.Close(fd)
		delete(e.portFDs, a)
		e.portFDCount.Store(int64(len(e.portFDs)))
	}
}

// holdCounters adds "local_ports_held" (ports outside the range reserved
// for the pairs using them), "local_ports_unreserved" (such ports not
// reserved: someone else's, or too few ephemeral ports would be left)
// and "port_hold_descriptors" (pairs keeping a descriptor for their
// port), all three gauges.
func (e *Engine) holdCounters(out map[string]uint64) {
	held, unreserved := e.reserved.Load().HeldPorts()
	out["local_ports_held"] = uint64(held)
	out["local_ports_unreserved"] = uint64(unreserved)
	out["port_hold_descriptors"] = uint64(e.portFDCount.Load())
}

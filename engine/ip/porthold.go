// Holding the local port of a spliced pair once the forwarder's sockets are closed: claimed in the engine's range (localports.go), reserved in the home namespace while the pair is in the table, or, where it cannot be, held by a duplicate of the frozen upstream socket.

package ip

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/ports"
	"github.com/splicer/splicer/internal/sockopt"
)

// portHolder holds the local ports of the pairs in the datapath, so that
// no new upstream connection to the same server takes a spliced pair's
// 4-tuple: the range of Options.LocalPorts (its allocator and its
// reservation, localports.go), the ports outside it reserved too, and
// descriptors for the ports neither holds.
type portHolder struct {
	log *slog.Logger
	// alloc hands out the range's ports and claims those of pairs in
	// the table; nil without Options.LocalPorts, or once the range
	// could not be reserved.
	alloc atomic.Pointer[ports.Allocator]
	// reserved is the range's reservation in the home namespace, made
	// before the first attachment or adoption; it also holds the ports
	// outside the range of pairs in the table. nil until then, and
	// without a range.
	reserved atomic.Pointer[ports.Reservation]
	// resMu guards tried (the reservation was attempted), and orders
	// making the reservation with giving it back.
	resMu sync.Mutex
	tried bool
	// fdsMu guards fds and closed.
	fdsMu sync.Mutex
	// fds are, by A tuple, duplicates of the frozen upstream sockets of
	// the pairs whose ports neither the range nor the reservation holds,
	// until the pair leaves the table. closed: the engine is closing,
	// and a new duplicate is closed at once.
	fds    map[datapath.Tuple]int
	closed bool
	// fdCount is len(fds), for Counters; warned: a failed reservation
	// was logged.
	fdCount atomic.Int64
	warned  atomic.Bool
	// reuse takes the ports of ended pairs again when the range is
	// busy toward a server (portreuse.go).
	reuse *portReuse
}

func newPortHolder(log *slog.Logger, timeWait time.Duration) *portHolder {
	return &portHolder{log: log, fds: make(map[datapath.Tuple]int), reuse: newPortReuse(timeWait)}
}

// onTable is the datapaths' Options.OnTable with a port range, nil
// without: each pair's port is claimed while the pair is in the table,
// or, outside the range, counted for the reservation to hold. Both only
// count: the table's lock is held.
func (h *portHolder) onTable() func(datapath.Tuple, bool) {
	a := h.alloc.Load()
	if a == nil {
		return nil
	}
	return func(b datapath.Tuple, in bool) {
		port := b.Dst.Port()
		switch {
		case a.Range().Contains(port) && in:
			a.Claim(b.Src, port)
		case a.Range().Contains(port):
			a.Unclaim(b.Src, port)
		case in:
			h.reserved.Load().Hold(port)
		default:
			h.reserved.Load().Unhold(port)
		}
	}
}

// hold holds the local port of the pair spec, whose upstream socket
// up is about to be closed (or left frozen), from the kernel's picks for
// as long as the datapath has the pair, so that no new connection to
// the same server takes its 4-tuple:
//
//   - a port of the engine's range is claimed already (the allocator
//     skips it toward that server);
//   - any other port was counted as the pair entered the table
//     (onTable: ports.Reservation.Hold) and is now added to
//     ip_local_reserved_ports, in one write for all the splices that
//     wait for one (Sync): no descriptor per pair;
//   - where that cannot be (no range configured, the sysctl not
//     writable, the port reserved by someone else, or the kernel left
//     with too few ephemeral ports), a duplicate of up holds it.
func (h *portHolder) hold(spec datapath.PairSpec, up *net.TCPConn) error {
	if h.claimed(spec.B) {
		return nil
	}
	if res := h.reserved.Load(); res != nil {
		err := res.Sync()
		if err == nil && res.Held(spec.B.Dst.Port()) {
			return nil
		}
		if err != nil && h.warned.CompareAndSwap(false, true) {
			h.log.Warn("reserving the local ports of pairs dialled outside the range: each such pair holds a descriptor instead", "err", err)
		}
	}
	return h.holdDescriptor(spec.A, up)
}

// holdDescriptor duplicates up's descriptor for pair a. The duplicate
// stays frozen (it sends nothing, and its keepalive is off: a keepalive
// timeout would send a reset) and stays in the established table, so the
// kernel picks another port for new connections to the same server.
func (h *portHolder) holdDescriptor(a datapath.Tuple, up *net.TCPConn) error {
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
	h.fdsMu.Lock()
	defer h.fdsMu.Unlock()
	if h.closed {
		unix.Close(fd)
		return nil
	}
	if old, ok := h.fds[a]; ok {
		unix.Close(old)
	}
	h.fds[a] = fd
	h.fdCount.Store(int64(len(h.fds)))
	return nil
}

// release lets go of what holds pair a's port, once the pair left the
// table (a reserved port is let go as it leaves: onTable). A held
// descriptor is still in repair mode, so closing it sends nothing.
func (h *portHolder) release(a datapath.Tuple) {
	h.fdsMu.Lock()
	defer h.fdsMu.Unlock()
	h.releaseLocked(a)
}

func (h *portHolder) releaseLocked(a datapath.Tuple) {
	if fd, ok := h.fds[a]; ok {
		unix.Close(fd)
		delete(h.fds, a)
		h.fdCount.Store(int64(len(h.fds)))
	}
}

// releaseAll closes every held descriptor, at Close, and every one held
// from now on.
func (h *portHolder) releaseAll() {
	h.fdsMu.Lock()
	defer h.fdsMu.Unlock()
	h.closed = true
	for a := range h.fds {
		h.releaseLocked(a)
	}
}

// counters adds "local_ports_exhausted" (localports.go: UpstreamPort),
// "local_ports_reused" (ports of ended pairs taken again: portreuse.go),
// "local_ports_leased" (ports handed out whose connections are open, a
// gauge),
// "local_ports_held" (ports outside the range reserved for the pairs
// using them), "local_ports_unreserved" (such ports not reserved:
// someone else's, or too few ephemeral ports would be left) and
// "port_hold_descriptors" (pairs holding a descriptor for their port),
// the last three gauges.
func (h *portHolder) counters(out map[string]uint64) {
	if a := h.alloc.Load(); a != nil {
		out["local_ports_exhausted"] = a.Exhausted()
		out["local_ports_leased"] = uint64(a.Leased())
	}
	out["local_ports_reused"] = h.reuse.reused.Load()
	held, unreserved := h.reserved.Load().HeldPorts()
	out["local_ports_held"] = uint64(held)
	out["local_ports_unreserved"] = uint64(unreserved)
	out["port_hold_descriptors"] = uint64(h.fdCount.Load())
}

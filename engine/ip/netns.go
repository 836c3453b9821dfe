// The engine's network namespace: where its devices are, which device reaches a peer, and running namespace-bound calls there.

package ip

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// homeNS is the network namespace the engine was loaded in. Device indexes
// only mean something inside one namespace, and the Go scheduler may run
// Splice on any thread, so routes are looked up through a netlink socket
// opened there and programs are attached from a thread switched there.
type homeNS struct {
	ns  netns.NsHandle
	ino uint64

	mu sync.Mutex // netlink requests on one socket do not interleave
	nl *netlink.Handle
}

// openHomeNS captures the calling thread's namespace.
func openHomeNS() (*homeNS, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("engine ip: current network namespace: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		ns.Close()
		return nil, fmt.Errorf("engine ip: stat network namespace: %w", err)
	}
	// The calling thread is in ns: a plain handle opens its socket here,
	// where NewHandleAt would setns, which needs CAP_SYS_ADMIN even into
	// the namespace a process already is in.
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("engine ip: netlink: %w", err)
	}
	return &homeNS{ns: ns, ino: st.Ino, nl: nl}, nil
}

func (h *homeNS) close() {
	h.nl.Close()
	h.ns.Close()
}

// errLocalPeer marks a peer on this host: its packets never cross a device
// with the program attached.
var errLocalPeer = errors.New("the peer is on this host (loopback): its packets do not cross a device")

// deviceTo returns the index of the device that packets to peer leave
// through.
func (h *homeNS) deviceTo(peer netip.Addr) (int, error) {
	h.mu.Lock()
	routes, err := h.nl.RouteGet(peer.AsSlice())
	h.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("route to %v: %w", peer, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex <= 0 {
		return 0, fmt.Errorf("no route to %v", peer)
	}
	r := routes[0]
	if r.Type == unix.RTN_LOCAL {
		return 0, errLocalPeer
	}
	h.mu.Lock()
	l, err := h.nl.LinkByIndex(r.LinkIndex)
	h.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("device %d toward %v: %w", r.LinkIndex, peer, err)
	}
	switch l.Attrs().EncapType {
	case "ether":
	case "loopback":
		return 0, errLocalPeer
	default:
		return 0, fmt.Errorf("device %s toward %v is %s, not Ethernet", l.Attrs().Name, peer, l.Attrs().EncapType)
	}
	return r.LinkIndex, nil
}

// do runs fn on a thread in the home namespace.
func (h *homeNS) do(fn func() error) error {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer cur.Close()
	if cur.Equal(h.ns) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(h.ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter the engine's network namespace: %w", err)
	}
	defer func() {
		// A thread that cannot return stays locked, and Go destroys it
		// when this goroutine exits, rather than run others in the
		// wrong namespace.
		if netns.Set(cur) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// The engine's network namespace: where its devices are, which device reaches a peer, and running namespace-bound calls there.

package ip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/peerclock"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// homeNS is the network namespace the engine was loaded in. Device indexes
// only mean something inside one namespace, and the Go scheduler may run
// Splice on any thread, so routes are looked up through a netlink socket
// opened there and programs are attached from a thread switched there.
type homeNS struct {
	ns       netns.NsHandle
	ino, dev uint64
	// cookie is the namespace's SO_NETNS_COOKIE, 0 where the kernel has
	// none (before 5.14).
	cookie uint64
	// outside is the namespace of the threads of unlocked goroutines
	// (Go starts every thread from one in that state) if known and not
	// ns, netns.None() otherwise; atHome: it is ns.
	outside netns.NsHandle
	atHome  bool
	// nsid is ns's id (netnsid) in outside, -1 if it has none: BPF
	// socket lookups name ns by it and need no setns.
	nsid int32

	mu sync.Mutex // netlink requests on one socket do not interleave
	nl *netlink.Handle

	routes routeCache
}

// routeCache remembers deviceTo's answers until the namespace's routing
// changes: a route lookup through netlink costs tens of microseconds, two
// per splice, while a forwarder sees the same few servers (and often the
// same clients) again and again. A netlink socket subscribed to every
// change that can move a route (links, addresses, routes, rules) clears
// it; without that subscription nothing is cached. A change takes effect
// once its notification has been read, microseconds later: a splice in
// between uses the old route, as one that looked it up just before the
// change would.
type routeCache struct {
	mu      sync.Mutex // guards watch, gen and devices
	watch   *os.File   // the subscription; nil: not caching
	gen     uint64     // bumped by every notification
	devices map[netip.Addr]int
}

// maxRoutes bounds the cache; it starts over when full.
const maxRoutes = 1 << 16

// routeGroups are the rtnetlink multicast groups whose messages may move
// a route: RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV4_ROUTE,
// RTMGRP_IPV4_RULE, RTMGRP_IPV6_IFADDR, RTMGRP_IPV6_ROUTE, and
// RTNLGRP_IPV6_RULE (19), which has no RTMGRP_ constant.
const routeGroups = unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV4_RULE |
	unix.RTMGRP_IPV6_IFADDR | unix.RTMGRP_IPV6_ROUTE | 1<<(unix.RTNLGRP_IPV6_RULE-1)

// watchRoutes subscribes, in the calling thread's namespace, to the
// changes that may move a route, and clears the cache on each until the
// subscription is closed. An error leaves the cache off.
func (c *routeCache) watchRoutes() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: routeGroups}); err != nil {
		unix.Close(fd)
		return err
	}
	f := os.NewFile(uintptr(fd), "rtnetlink") // non-blocking: read through the poller, so Close ends the read
	c.mu.Lock()
	c.watch, c.devices = f, make(map[netip.Addr]int)
	c.mu.Unlock()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			_, err := f.Read(buf)
			// Any message, and a lost one (ENOBUFS), may have moved a
			// route; any other error ends the caching.
			stop := err != nil && !errors.Is(err, unix.ENOBUFS)
			c.mu.Lock()
			c.gen++
			clear(c.devices)
			if stop {
				c.watch = nil
			}
			c.mu.Unlock()
			if stop {
				f.Close()
				return
			}
		}
	}()
	return nil
}

// get returns the cached device toward peer, and the generation to hand
// put after a lookup.
func (c *routeCache) get(peer netip.Addr) (ifindex int, gen uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ifindex, ok = c.devices[peer]
	return ifindex, c.gen, ok
}

// put caches a device looked up at generation gen, unless the routing
// changed since.
func (c *routeCache) put(peer netip.Addr, ifindex int, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watch == nil || c.gen != gen {
		return
	}
	if len(c.devices) >= maxRoutes {
		clear(c.devices)
	}
	c.devices[peer] = ifindex
}

func (c *routeCache) close() {
	c.mu.Lock()
	f := c.watch
	c.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// openHomeNS captures the calling thread's namespace.
func openHomeNS(log *slog.Logger) (*homeNS, error) {
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
	h := &homeNS{ns: ns, ino: st.Ino, dev: st.Dev, nl: nl, outside: netns.None(), cookie: netnsCookie(), nsid: -1}
	// The calling thread may be locked in ns while the process's threads
	// live elsewhere; a new goroutine runs on an unlocked thread.
	type seen struct {
		ns   netns.NsHandle
		nsid int32
	}
	outside := make(chan seen)
	go func() {
		o, err := netns.Get()
		if err != nil {
			o = netns.None()
		}
		outside <- seen{o, idFromOutside(ns, o)}
	}()
	switch o := <-outside; {
	case o.ns.Equal(ns):
		h.atHome = true
		o.ns.Close()
	case o.ns.IsOpen():
		h.outside, h.nsid = o.ns, o.nsid
	}
	if err := h.routes.watchRoutes(); err != nil {
		log.Info("route changes cannot be watched: every splice looks its routes up", "err", err)
	}
	return h, nil
}

func (h *homeNS) close() {
	if h.outside.IsOpen() {
		h.outside.Close()
	}
	h.routes.close()
	h.nl.Close()
	h.ns.Close()
}

// idFromOutside returns ns's id in the calling thread's namespace, o
// (peerclock.NetnsID), or -1 where it has none or ns is o.
func idFromOutside(ns, o netns.NsHandle) int32 {
	if !o.IsOpen() || o.Equal(ns) {
		return -1
	}
	id, err := peerclock.NetnsID(ns)
	if err != nil {
		return -1
	}
	return id
}

// netnsCookie returns the calling thread's network namespace cookie, or
// 0 if the kernel has none.
func netnsCookie() uint64 {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0
	}
	return c
}

// errOtherNS marks a socket outside the home namespace.
var errOtherNS = errors.New("the socket is in another network namespace than the one engine ip was loaded in")

// owns checks that c is in the home namespace: by cookie (one call), or
// by the namespace's inode (SIOCGSKNS, three calls) on kernels without.
func (h *homeNS) owns(c *net.TCPConn) error {
	if h.cookie != 0 {
		cookie, err := tcprepair.NetnsCookie(c)
		if err != nil {
			return err
		}
		if cookie != h.cookie {
			return errOtherNS
		}
		return nil
	}
	ino, err := tcprepair.NetnsInode(c)
	if err != nil {
		return err
	}
	if ino != h.ino {
		return errOtherNS
	}
	return nil
}

// errLocalPeer marks a peer on this host: its packets never cross a device
// with the program attached.
var errLocalPeer = errors.New("the peer is on this host (loopback): its packets do not cross a device")

// deviceTo returns the index of the device that packets to peer leave
// through.
func (h *homeNS) deviceTo(peer netip.Addr) (int, error) {
	ifindex, gen, ok := h.routes.get(peer)
	if ok {
		return ifindex, nil
	}
	ifindex, err := h.lookupDevice(peer)
	if err == nil {
		h.routes.put(peer, ifindex, gen)
	}
	return ifindex, err
}

// lookupDevice is deviceTo through netlink: the route, then its device's
// type.
func (h *homeNS) lookupDevice(peer netip.Addr) (int, error) {
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

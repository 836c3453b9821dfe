// This host's own addresses, read from the kernel's local routes and kept for a second, for the destination check.

package acl

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// localMaxAge is how long a read of the local routes serves: an address
// added to an interface is protected at most this long after. Reading
// costs a route dump (~100 µs on the lab VM), too much for every dial.
const localMaxAge = time.Second

// LocalAddrs knows the addresses of this network namespace: the
// destinations of its RTN_LOCAL routes, which are every address of its
// interfaces and any prefix routed to the host itself ("ip route add
// local"). A connection to any of them reaches a service of this host,
// loopback or not. The zero value is ready to use.
//
// The routes are read in the network namespace of the calling thread,
// the one where the socket being checked is made (sockopt.Control runs
// on the dialling thread).
type LocalAddrs struct {
	mu   sync.Mutex
	read time.Time
	// prefixes are the local routes' destinations as last read.
	prefixes []netip.Prefix
	// list reads them; nil reads the kernel's (readLocal).
	list func() ([]netip.Prefix, error)
}

// Contains reports whether a is an address of this host.
func (l *LocalAddrs) Contains(a netip.Addr) bool {
	a = a.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.prefixes == nil || now.Sub(l.read) >= localMaxAge {
		l.refresh(now)
	}
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refresh reads the local addresses again. A failed read keeps the last
// list (an address of the host is no less one because a dump failed).
func (l *LocalAddrs) refresh(now time.Time) {
	list := l.list
	if list == nil {
		list = readLocal
	}
	ps, err := list()
	if err != nil {
		return
	}
	l.prefixes, l.read = ps, now
}

// readLocal lists the destinations of the local routing table's RTN_LOCAL
// routes, or, where netlink cannot, the interfaces' addresses.
func readLocal() ([]netip.Prefix, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
	if err != nil {
		return interfaceAddrs()
	}
	ps := make([]netip.Prefix, 0, len(routes))
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if p, ok := prefixOf(r.Dst); ok {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// interfaceAddrs is every interface address as a single-address prefix.
func interfaceAddrs() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	ps := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				ip = ip.Unmap()
				ps = append(ps, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return ps, nil
}

// prefixOf converts a route destination.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	ip = ip.Unmap()
	if ip.Is4() && ones > 32 {
		ones -= 96
	}
	return netip.PrefixFrom(ip, ones).Masked(), true
}

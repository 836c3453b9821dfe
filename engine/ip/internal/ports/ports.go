// Package ports hands out the local ports of the forwarder's upstream connections from a range the engine owns, so that a spliced pair's port, which no socket holds any more, goes to no new connection to the same server.
//
// Once engine ip has spliced a pair until it closes, both forwarder sockets
// are closed (in repair mode: nothing is sent), but the datapath still
// forwards the pair, and then keeps it through TIME_WAIT. A new connection
// to the same server from the same local port would collide with it: the
// server still has the old connection, and the datapath drops the new
// one's SYN-ACK. The kernel cannot know, since no socket holds the port.
// So the upstream connections of listeners that may splice with ip are
// dialled from a range of local ports that is taken out of the kernel's
// ephemeral range (net.ipv4.ip_local_reserved_ports, per network
// namespace: Reserve), and an Allocator picks each dial's port, skipping
// the ports of pairs in the datapath's table toward that server (Claim,
// Unclaim). Ports held by sockets the kernel checks itself: the dialler
// binds with SO_REUSEADDR, so a port may serve connections to different
// servers, and connect fails with EADDRNOTAVAIL on a 4-tuple that a
// socket (or a kernel TIME_WAIT) still uses, whereupon the dialler tries
// the next port.
package ports

import (
	"fmt"
	"net/netip"
	"sync"
)

// Range is an inclusive range of local ports.
type Range struct{ Low, High uint16 }

// Valid reports whether r is a non-empty range of non-zero ports.
func (r Range) Valid() bool { return r.Low > 0 && r.Low <= r.High }

// Contains reports whether port is in r.
func (r Range) Contains(port uint16) bool { return port >= r.Low && port <= r.High }

// Len is the number of ports in r.
func (r Range) Len() int { return int(r.High) - int(r.Low) + 1 }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Low, r.High) }

// key is one claimed port: the server's address and port, and the local
// port. The local address is left out (the dialler binds the wildcard and
// routing picks it), which only makes a claim cover more.
type key struct {
	server [16]byte
	sport  uint16
	local  uint16
}

func keyOf(server netip.AddrPort, local uint16) key {
	return key{server: server.Addr().Unmap().As16(), sport: server.Port(), local: local}
}

// Allocator picks local ports in a Range for new connections and keeps
// the claimed ones (pairs in the datapath's table) out of the picks. Safe
// for concurrent use.
type Allocator struct {
	r       Range
	mu      sync.Mutex
	next    uint16 // the next port to try: picks go round the range
	claimed map[key]struct{}
	// others are the ports of other processes' pairs (SetOthers).
	others map[key]struct{}
}

// Use is a local port in use toward a server.
type Use struct {
	Server netip.AddrPort
	Local  uint16
}

// SetOthers replaces the ports that other processes' datapaths use (the
// old process of an upgrade, still forwarding its pairs): picks skip
// them too. Ports outside the range are ignored.
func (a *Allocator) SetOthers(uses []Use) {
	m := make(map[key]struct{}, len(uses))
	for _, u := range uses {
		if a.r.Contains(u.Local) {
			m[keyOf(u.Server, u.Local)] = struct{}{}
		}
	}
	a.mu.Lock()
	a.others = m
	a.mu.Unlock()
}

// NewAllocator returns an allocator over r.
func NewAllocator(r Range) *Allocator {
	return &Allocator{r: r, next: r.Low, claimed: make(map[key]struct{})}
}

// Range is the allocator's range.
func (a *Allocator) Range() Range { return a.r }

// Pick returns the next port of the range that no claim holds toward
// server, going round the range, so that a port just given up is the
// last one tried again; false when every port is claimed.
func (a *Allocator) Pick(server netip.AddrPort) (uint16, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range a.r.Len() {
		p := a.next
		if a.next == a.r.High {
			a.next = a.r.Low
		} else {
			a.next++
		}
		k := keyOf(server, p)
		_, busy := a.claimed[k]
		_, other := a.others[k]
		if !busy && !other {
			return p, true
		}
	}
	return 0, false
}

// Claim marks local port busy toward server, if it is in the range, and
// reports whether it is: a pair entered the datapath's table.
func (a *Allocator) Claim(server netip.AddrPort, local uint16) bool {
	if !a.r.Contains(local) {
		return false
	}
	a.mu.Lock()
	a.claimed[keyOf(server, local)] = struct{}{}
	a.mu.Unlock()
	return true
}

// Unclaim frees what Claim marked: the pair left the table.
func (a *Allocator) Unclaim(server netip.AddrPort, local uint16) {
	if !a.r.Contains(local) {
		return
	}
	a.mu.Lock()
	delete(a.claimed, keyOf(server, local))
	a.mu.Unlock()
}

// Claimed is the number of claims held.
func (a *Allocator) Claimed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.claimed)
}

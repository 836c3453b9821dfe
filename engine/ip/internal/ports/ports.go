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
// Unclaim). The dialler binds with SO_REUSEADDR, so a port may serve
// connections to different servers, and connect fails with EADDRNOTAVAIL
// on a 4-tuple that a socket (or a kernel TIME_WAIT) still uses,
// whereupon the dialler tries the next port. A port Pick hands out is
// leased toward its server until the connection dialled from it closes
// (Dialled, Reap) or the dial gives it back (Release): a pair in control
// mode still using it may be spliced, its socket closed, between another
// dial's pick and connect, and that connect would then succeed on the
// spliced pair's 4-tuple. When every port is busy toward a server, Pick
// asks the engine to free one (SetReclaim: a pair ended long enough ago
// that a new connection on its 4-tuple is safe).
package ports

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
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

// serverKey is a server's address and port. The local address is left out
// (the dialler binds the wildcard and routing picks it), which only makes
// a claim cover more.
type serverKey struct {
	addr [16]byte
	port uint16
}

func serverOf(s netip.AddrPort) serverKey {
	return serverKey{addr: s.Addr().Unmap().As16(), port: s.Port()}
}

// key is one claimed port: the server and the local port.
type key struct {
	serverKey
	local uint16
}

func keyOf(s netip.AddrPort, local uint16) key {
	return key{serverKey: serverOf(s), local: local}
}

// Allocator picks local ports in a Range for new connections and keeps
// the claimed ones (pairs in the datapath's table) out of the picks. Safe
// for concurrent use.
//
// Every listener's dials pick here, under one mutex, so a pick must not
// walk the range: tens of thousands of short spliced pairs within their
// TIME_WAIT claim every port toward their server, and a walk of the
// 20,000 ports (two map lookups each, milliseconds) per dial held every
// listener of the process to a few hundred connections a second. So the
// ports busy toward each server are kept in a portSet, which knows at
// once that it is full and finds a free port in at most a word per 64
// ports.
type Allocator struct {
	r    Range
	mu   sync.Mutex
	next uint16 // the next port to try: picks go round the range
	// claimed are the ports of this process's pairs (Claim), per server
	// as offsets from r.Low (a set, not a map keyed by server and port:
	// every idle spliced pair holds its claim for its life), nClaimed
	// their count; others those of other processes' pairs (SetOthers),
	// leased those Pick handed out whose connections may still use
	// them; busy is their union, per server that has any, as offsets
	// from r.Low: what Pick reads.
	claimed  map[serverKey]*portSet
	nClaimed int
	others   map[key]struct{}
	leased   map[key]*lease
	busy     map[serverKey]*portSet
	// notes are the Notes of the connections Dialled from busy ports,
	// per server by local port (a pair's note, too, lasts its life).
	notes map[serverKey]map[uint16]Note
	// reclaim, if set, frees a port toward a server whose ports are all
	// busy (SetReclaim).
	reclaim atomic.Pointer[func(netip.AddrPort) bool]
	// exhausted counts the picks refused because every port was busy
	// toward the server (Exhausted).
	exhausted atomic.Uint64
	probes    int // ports and words Pick examined, for the tests
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
	defer a.mu.Unlock()
	for k := range a.others {
		if _, still := m[k]; !still {
			delete(a.others, k)
			a.unmarkUnlessHeld(k)
		}
	}
	for k := range m {
		if _, had := a.others[k]; !had {
			a.others[k] = struct{}{}
			a.mark(k)
		}
	}
}

// NewAllocator returns an allocator over r.
func NewAllocator(r Range) *Allocator {
	return &Allocator{r: r, next: r.Low, claimed: make(map[serverKey]*portSet),
		others: make(map[key]struct{}), leased: make(map[key]*lease), notes: make(map[serverKey]map[uint16]Note),
		busy: make(map[serverKey]*portSet)}
}

// Range is the allocator's range.
func (a *Allocator) Range() Range { return a.r }

// Pick returns the next port of the range that nothing holds toward
// server (no claim, no lease, no other process), going round the range,
// so that a port just given up is the last one tried again, and leases
// it toward server until Release, or until the connection Dialled from
// it is closed. When every port is busy, known without looking at the
// ports, it asks the reclaim function (SetReclaim) to free one, and
// failing that returns false, so that the dial takes a kernel port at
// once.
func (a *Allocator) Pick(server netip.AddrPort) (uint16, bool) {
	if p, ok := a.lease(server); ok {
		return p, true
	}
	// A port reclaimed here may go to a concurrent pick first: reclaim
	// again, a few times.
	for range reclaimTries {
		r := a.reclaim.Load()
		if r == nil || !(*r)(server) {
			break
		}
		if p, ok := a.lease(server); ok {
			return p, true
		}
	}
	a.exhausted.Add(1)
	return 0, false
}

// reclaimTries bounds the reclaims of one pick.
const reclaimTries = 4

// lease picks and leases a free port toward server, if any.
func (a *Allocator) lease(server netip.AddrPort) (uint16, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	off, ok := a.busy[serverOf(server)].nextFree(int(a.next-a.r.Low), &a.probes)
	if !ok {
		return 0, false
	}
	a.next = a.r.Low + uint16((off+1)%a.r.Len())
	port := a.r.Low + uint16(off)
	k := keyOf(server, port)
	a.leased[k] = &lease{at: time.Now()}
	a.mark(k)
	return port, true
}

// SetReclaim has Pick call reclaim when every port is busy toward a
// server, outside the allocator's lock (reclaim may Unclaim): reclaim
// reports whether it freed one.
func (a *Allocator) SetReclaim(reclaim func(server netip.AddrPort) bool) {
	a.reclaim.Store(&reclaim)
}

// Claim marks local port busy toward server, if it is in the range, and
// reports whether it is: a pair entered the datapath's table.
func (a *Allocator) Claim(server netip.AddrPort, local uint16) bool {
	if !a.r.Contains(local) {
		return false
	}
	k := keyOf(server, local)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.claim(k) {
		a.mark(k)
	}
	return true
}

// Unclaim frees what Claim marked: the pair left the table.
func (a *Allocator) Unclaim(server netip.AddrPort, local uint16) {
	if !a.r.Contains(local) {
		return
	}
	k := keyOf(server, local)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.unclaim(k) {
		a.unmarkUnlessHeld(k)
	}
}

// claim adds k to the claimed ports, reporting whether it was not.
func (a *Allocator) claim(k key) bool {
	s := a.claimed[k.serverKey]
	if s == nil {
		s = newPortSet(a.r.Len())
		a.claimed[k.serverKey] = s
	}
	i := int(k.local - a.r.Low)
	if s.has(i) {
		return false
	}
	s.add(i)
	a.nClaimed++
	return true
}

// unclaim takes k out of the claimed ports, reporting whether it was
// in; a server with no claim left is dropped.
func (a *Allocator) unclaim(k key) bool {
	s := a.claimed[k.serverKey]
	i := int(k.local - a.r.Low)
	if s == nil || !s.has(i) {
		return false
	}
	s.remove(i)
	a.nClaimed--
	if s.n == 0 {
		delete(a.claimed, k.serverKey)
	}
	return true
}

func (a *Allocator) isClaimed(k key) bool {
	s := a.claimed[k.serverKey]
	return s != nil && s.has(int(k.local-a.r.Low))
}

// mark adds k, just claimed or used by another process, to busy.
func (a *Allocator) mark(k key) {
	s := a.busy[k.serverKey]
	if s == nil {
		s = newPortSet(a.r.Len())
		a.busy[k.serverKey] = s
	}
	s.add(int(k.local - a.r.Low))
}

// unmarkUnlessHeld takes k, just unclaimed or no longer used by another
// process, out of busy unless the other still holds it; a server with no
// busy port left is dropped.
func (a *Allocator) unmarkUnlessHeld(k key) {
	mine := a.isClaimed(k)
	_, theirs := a.others[k]
	_, lent := a.leased[k]
	s := a.busy[k.serverKey]
	if mine || theirs || lent || s == nil {
		return
	}
	a.dropNote(k)
	s.remove(int(k.local - a.r.Low))
	if s.n == 0 {
		delete(a.busy, k.serverKey)
	}
}

// Exhausted is the number of picks refused because every port of the
// range was busy toward the server: dials that took a kernel port.
func (a *Allocator) Exhausted() uint64 { return a.exhausted.Load() }

// Claimed is the number of claims held.
func (a *Allocator) Claimed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nClaimed
}

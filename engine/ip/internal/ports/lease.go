// Leases: a port Pick handed out stays busy toward its server while the connection dialled from it may use it.

package ports

import (
	"net/netip"
	"time"
)

// PendingLease bounds a lease whose dial never reported (Dialled or
// Release): longer than any connect, SYN retries included (about 2
// minutes with Linux's defaults).
const PendingLease = 3 * time.Minute

// lease is a port handed out by Pick.
type lease struct {
	// alive reports whether the connection dialled from the port is
	// open; nil until Dialled.
	alive func() bool
	at    time.Time
}

// Note is what the engine records of the connection dialled from a port
// (Dialled) and reads back while the port is busy toward its server
// (engine ip: the kernel's timestamp offset of the connection's 4-tuple,
// for taking the port again once the connection's pair ended).
type Note struct {
	V    uint32
	Flag bool
}

// Dialled says that the connection dialled from local, a port Pick
// returned for server, is up: the port stays leased toward server until
// alive reports it closed (Reap), and n is kept while the port is busy
// toward server (leased, or claimed by the connection's pair: NoteOf). A
// nil alive gives the port back, as Release does.
func (a *Allocator) Dialled(server netip.AddrPort, local uint16, alive func() bool, n Note) {
	if alive == nil {
		a.Release(server, local)
		return
	}
	k := keyOf(server, local)
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.leased[k]; l != nil {
		l.alive = alive
		a.setNote(k, n)
	}
}

// NoteOf returns the Note of the latest connection Dialled from local
// toward server, if the port has been busy toward server since.
func (a *Allocator) NoteOf(server netip.AddrPort, local uint16) (Note, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := keyOf(server, local)
	n, ok := a.notes[k.serverKey][k.local]
	return n, ok
}

// setNote keeps n for k, with mu held.
func (a *Allocator) setNote(k key, n Note) {
	m := a.notes[k.serverKey]
	if m == nil {
		m = make(map[uint16]Note)
		a.notes[k.serverKey] = m
	}
	m[k.local] = n
}

// dropNote forgets k's note, with mu held; a server with none left is
// dropped.
func (a *Allocator) dropNote(k key) {
	m := a.notes[k.serverKey]
	if m == nil {
		return
	}
	delete(m, k.local)
	if len(m) == 0 {
		delete(a.notes, k.serverKey)
	}
}

// Release gives back the lease of local toward server: its dial failed,
// or bound another port.
func (a *Allocator) Release(server netip.AddrPort, local uint16) {
	if !a.r.Contains(local) {
		return
	}
	k := keyOf(server, local)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked(k)
}

func (a *Allocator) releaseLocked(k key) {
	if _, had := a.leased[k]; had {
		delete(a.leased, k)
		a.unmarkUnlessHeld(k)
	}
}

// Reap gives back the leases whose connections are closed, and those
// whose dial never reported within PendingLease of now. A closed
// connection's port is held from then on by its pair in the table
// (Claim), by the kernel's TIME_WAIT (connect fails on it), or by
// nothing. The engine reaps at every sweep.
func (a *Allocator) Reap(now time.Time) {
	type held struct {
		k key
		l *lease
	}
	var check []held
	a.mu.Lock()
	for k, l := range a.leased {
		switch {
		case l.alive != nil:
			check = append(check, held{k, l})
		case now.Sub(l.at) >= PendingLease:
			a.releaseLocked(k)
		}
	}
	a.mu.Unlock()
	// alive runs outside the lock: it may take a connection's.
	gone := check[:0]
	for _, h := range check {
		if !h.l.alive() {
			gone = append(gone, h)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range gone {
		if a.leased[h.k] == h.l { // not given back and leased again meanwhile
			a.releaseLocked(h.k)
		}
	}
}

// Leased is the number of leases held.
func (a *Allocator) Leased() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.leased)
}

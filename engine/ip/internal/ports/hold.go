// Ports outside a Reservation's range that spliced pairs use with no socket left to keep them: reserved in ip_local_reserved_ports while held, so that no descriptor per pair is needed.

package ports

import (
	"fmt"
	"math/bits"
	"os"
	"sync"
)

// PortRangePath is the kernel's ephemeral ports (per network namespace):
// the ports a connect or a bind to port 0 picks from.
const PortRangePath = "/proc/sys/net/ipv4/ip_local_port_range"

// holds counts, per port outside the range, the pairs that use it (Hold,
// Unhold), and knows which of those ports this reservation added to the
// sysctl (owned), to take them out again. Hold and Unhold only count, and
// may run under other locks (a datapath's, as pairs enter and leave its
// table); Sync writes. mu guards the counts and sets; wmu serializes the
// writes, so that Syncs that wait for one another find their changes
// written by the first and share its write.
type holds struct {
	mu sync.Mutex
	n  map[uint16]int32
	// owned: added to the sysctl by this reservation (or taken over from
	// a predecessor's record); want: held but not owned, for Sync to add;
	// dropped: owned but no longer held, for Sync to remove.
	// filler: owned ports nobody holds, reserved only so that the list
	// fits one write (writeSysctl).
	owned, want, dropped, filler Set
	// gen counts the changes to want and dropped, synced the last one a
	// Sync has written.
	gen, synced uint64
	wmu         sync.Mutex
}

// Hold counts a pair that uses local port p, outside the range, with no
// socket that keeps it: Sync reserves it. Cheap: it writes nothing.
func (res *Reservation) Hold(p uint16) {
	if res == nil || res.r.Contains(p) {
		return
	}
	h := &res.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[uint16]int32)
	}
	if h.n[p]++; h.n[p] > 1 {
		return
	}
	if h.owned.Has(p) {
		h.dropped.Remove(p)
		h.filler.Remove(p) // held now: the next rewrite keeps it
	} else {
		h.want.Add(p)
	}
	h.gen++
}

// Unhold undoes a Hold: the pair left the table. The port stays reserved
// until the next Sync.
func (res *Reservation) Unhold(p uint16) {
	if res == nil || res.r.Contains(p) {
		return
	}
	h := &res.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[p] == 0 {
		return
	}
	if h.n[p]--; h.n[p] > 0 {
		return
	}
	delete(h.n, p)
	if h.owned.Has(p) {
		h.dropped.Add(p)
	} else {
		h.want.Remove(p)
	}
	h.gen++
}

// Held reports whether port p is held and reserved by this reservation,
// as of the last Sync: a pair using it needs nothing else to keep it.
func (res *Reservation) Held(p uint16) bool {
	if res == nil {
		return false
	}
	h := &res.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[p] > 0 && h.owned.Has(p)
}

// HeldPorts is the number of ports outside the range that this
// reservation keeps reserved for the pairs using them, and the number of
// ports held that it does not reserve (reserved by someone else, too few
// ephemeral ports would be left, or not written yet).
func (res *Reservation) HeldPorts() (held, unreserved int) {
	if res == nil {
		return 0, 0
	}
	h := &res.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	for p := range h.n {
		if h.owned.Has(p) {
			held++
		}
	}
	return held, h.want.Len()
}

// Sync writes the held ports into ip_local_reserved_ports and takes out
// those no longer held, in one write for every change made since the
// last Sync (none when nothing changed). A port reserved already by
// someone else is left to them (Held is false for it: its pair must keep
// its port another way), and so is a port of the kernel's ephemeral range
// whose reservation would leave it fewer than an eighth of that range:
// the kernel's own connections to every other destination need them,
// where a socket kept per pair would take the port toward one server
// only.
func (res *Reservation) Sync() error {
	if res == nil {
		return nil
	}
	h := &res.holds
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.mu.Lock()
	if h.synced == h.gen {
		h.mu.Unlock()
		return nil
	}
	g, add, drop, filler := h.gen, h.want, h.dropped, h.filler
	h.mu.Unlock()
	var added, removed, filled Set
	err := res.do(func() error {
		unlock := lockSysctl()
		defer unlock()
		cur, err := readSysctl()
		if err != nil {
			return err
		}
		lo, hi, err := readPortRange()
		if err != nil {
			return err
		}
		free := 0
		for p := lo; p <= hi; p++ {
			if !cur.Has(uint16(p)) {
				free++
			}
		}
		minFree := (hi - lo + 1) / 8
		add.each(func(p uint16) {
			ephemeral := int(p) >= lo && int(p) <= hi
			if cur.Has(p) || (ephemeral && free <= minFree) {
				return // left in want: Held is false
			}
			added.Add(p)
			if ephemeral {
				free--
			}
		})
		if drop.Empty() && filler.Empty() {
			if added.Empty() {
				return nil
			}
			return addSysctl(&added)
		}
		// Taking ports out rewrites the list: the fillers of the last
		// rewrite go too, and come back only if it is still too long.
		drop.Union(&filler)
		drop.each(func(p uint16) {
			if cur.Has(p) {
				cur.Remove(p)
				removed.Add(p)
			}
		})
		cur.Union(&added)
		filled, err = writeSysctl(&cur)
		return err
	})
	if err != nil {
		return fmt.Errorf("hold local ports (net.ipv4.ip_local_reserved_ports): %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	added.each(func(p uint16) {
		h.owned.Add(p)
		h.want.Remove(p)
		if h.n[p] == 0 { // unheld while being written
			h.dropped.Add(p)
			h.gen++
		}
	})
	removed.each(func(p uint16) {
		h.owned.Remove(p)
		h.dropped.Remove(p)
		h.filler.Remove(p)
		if h.n[p] > 0 { // held again while being written
			h.want.Add(p)
			h.gen++
		}
	})
	// Ports reserved only to keep the list in one write (writeSysctl):
	// the next rewrite takes them out again.
	filled.each(func(p uint16) {
		if !h.owned.Has(p) {
			h.owned.Add(p)
			h.filler.Add(p)
		}
	})
	h.synced = g
	return nil
}

// takeOver makes the ports of a predecessor's record outside r that are
// still reserved (cur) this reservation's: the pairs it adopts use them,
// Hold them as they enter the table and Unhold them as they leave, and
// Release gives back whatever is left.
func (h *holds) takeOver(earlier, cur *Set, r Range) {
	h.mu.Lock()
	defer h.mu.Unlock()
	earlier.each(func(p uint16) {
		if !r.Contains(p) && cur.Has(p) {
			h.owned.Add(p)
		}
	})
}

// readPortRange reads the ephemeral range of the calling thread's network
// namespace.
func readPortRange() (lo, hi int, err error) {
	b, err := os.ReadFile(PortRangePath)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("%s: %q: %w", PortRangePath, b, err)
	}
	return lo, hi, nil
}

// Remove takes p out of s.
func (s *Set) Remove(p uint16) { s.w[p/64] &^= 1 << (p % 64) }

// each calls f with every port of s, in order.
func (s *Set) each(f func(uint16)) {
	for i, w := range s.w {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			f(uint16(i*64 + b))
			w &^= 1 << b
		}
	}
}

// The local ports of upstream connections: the range reserved in the home namespace, handed out to the forwarder's dials, and held while the datapath has a pair (engine.UpstreamPorts).

package ip

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/ports"
)

// stateDir holds, per network namespace, the ports a process added to
// the reserved ones (ports.Reserve): the next process takes them over.
const stateDir = "/run/splicer"

// useRange makes r the range of local ports handed out; before the
// datapath loads (its OnTable claims them).
func (h *portHolder) useRange(r PortRange) {
	if r.Low != 0 {
		h.alloc.Store(ports.NewAllocator(ports.Range{Low: r.Low, High: r.High}))
	}
}

// reserve takes the range out of the home namespace's ephemeral
// ports, once, before the first attachment or adoption: a process that
// splices nothing (on loopback, say) leaves the namespace's sysctl alone,
// and no pair leaves its socket before the kernel stops picking the
// range's ports. Where it cannot (no privilege to write the sysctl, say), the
// engine stops handing out ports, and pairs hold a socket for theirs.
func (h *portHolder) reserve(home *homeNS) {
	a := h.alloc.Load()
	h.resMu.Lock()
	defer h.resMu.Unlock()
	if a == nil || h.tried {
		return
	}
	h.tried = true
	res, err := ports.Reserve(a.Range(), home.do, h.record(home))
	if err != nil {
		h.alloc.Store(nil)
		h.log.Warn("no local port range: each pair spliced until it closes holds a socket for its port", "err", err)
		return
	}
	h.reserved.Store(res)
	h.log.Info("local port range reserved for upstream connections", "ports", a.Range().String())
}

// giveBack gives the range back to the kernel's ephemeral ports,
// unless leave: pairs left for the next process still use it, and that
// process takes the reservation over (ports.Reserve's record).
func (h *portHolder) giveBack(leave bool) {
	h.resMu.Lock()
	defer h.resMu.Unlock()
	res := h.reserved.Swap(nil)
	if res == nil {
		return
	}
	if leave {
		if err := res.Handover(); err != nil {
			h.log.Warn("recording the local port range for the next process", "err", err)
		}
	} else if err := res.Release(); err != nil {
		h.log.Warn("giving the local port range back to the kernel", "err", err)
	}
}

// record is where the process of an upgrade that leaves its range
// reserved says so to the next (ports.Reservation.Handover), per network
// namespace and range: the workers of one master each hold a share of
// the range, and each upgrade hands on its own. "" without a range.
func (h *portHolder) record(home *homeNS) string {
	a := h.alloc.Load()
	if a == nil {
		return ""
	}
	return fmt.Sprintf("%s/reserved-ports-%d-%d", stateDir, home.ino, a.Range().Low)
}

// takeOver reserves the range at once when a previous process handed it
// over: this process gives it back at its end even if it never splices.
func (h *portHolder) takeOver(home *homeNS) {
	if _, err := os.Stat(h.record(home)); err == nil {
		h.reserve(home)
	}
}

// claimOthers takes the ports of the pairs that other live processes
// forward from the same pin directory (the old process of an upgrade,
// whose pairs this one adopts only once it exits) out of the picks:
// read from their pinned flow tables, at Probe and at every sweep.
// Without a pin directory (p nil) processes cannot see each other's
// pairs.
func (h *portHolder) claimOthers(p *pins) {
	a := h.alloc.Load()
	if a == nil || p == nil {
		return
	}
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return
	}
	var uses []ports.Use
	for _, ent := range ents {
		dir := filepath.Join(p.dir, ent.Name())
		p.mu.Lock()
		mine := dir == p.own || p.gens[dir] != nil // claimed through OnTable
		p.mu.Unlock()
		if mine || !ent.IsDir() {
			continue
		}
		flows, err := datapath.PinnedFlows(dir)
		if err != nil {
			continue // gone meanwhile, or another layout
		}
		for _, t := range flows {
			// B flows are server -> local; an A flow's local port is
			// a listener's, outside the range.
			uses = append(uses, ports.Use{Server: t.Src, Local: t.Dst.Port()})
		}
	}
	a.SetOthers(uses)
}

// UpstreamPort implements engine.UpstreamPorts: the next port of the
// range that no pair in the datapath uses toward server. False (let the
// kernel pick) without a range, or with every port of it in use toward
// server, which the allocator knows without a walk of the range (every
// listener's dials come here) and counts ("local_ports_exhausted"): that
// pair alone then takes a kernel port, and holds a socket for it if
// spliced.
func (e *Engine) UpstreamPort(server netip.AddrPort) (uint16, bool) {
	a := e.ports.alloc.Load()
	if a == nil {
		return 0, false
	}
	return a.Pick(server)
}

// UpstreamDialled implements engine.UpstreamPorts: the port UpstreamPort
// handed out for server stays leased while c is open (a pair in control
// mode uses it: ports.Allocator.Dialled), or goes back (nil c). c's
// timestamp clock, the kernel's for its 4-tuple, is noted for taking the
// port again once c's pair ended (portreuse.go).
func (e *Engine) UpstreamDialled(server netip.AddrPort, port uint16, c *net.TCPConn) {
	a := e.ports.alloc.Load()
	if a == nil {
		return
	}
	if c == nil {
		a.Release(server, port)
		return
	}
	a.Dialled(server, port, func() bool { return connOpen(c) }, dialledClock(c))
}

// UpstreamDialledLate implements engine.LateUpstreamPorts: the port
// stays leased as with UpstreamDialled, but c's timestamp clock is read
// only if c is to be spliced (UpstreamSplicing): until then the port is
// never taken again from c's ended pair, which only a splice by ip puts
// in the datapath anyway.
func (e *Engine) UpstreamDialledLate(server netip.AddrPort, port uint16, c *net.TCPConn) {
	a := e.ports.alloc.Load()
	if a == nil {
		return
	}
	a.Dialled(server, port, func() bool { return connOpen(c) }, ports.Note{Flag: true})
}

// UpstreamSplicing implements engine.LateUpstreamPorts: it notes c's
// timestamp clock, as UpstreamDialled does, if c left from a port of the
// range. c has not been spliced by ip (nor unspliced), so its clock is
// still the kernel's for its 4-tuple.
func (e *Engine) UpstreamSplicing(c *net.TCPConn) {
	a := e.ports.alloc.Load()
	if a == nil || c == nil {
		return
	}
	local, server := tcpAddrPort(c.LocalAddr()), tcpAddrPort(c.RemoteAddr())
	if !a.Range().Contains(local.Port()) {
		return
	}
	a.Dialled(server, local.Port(), func() bool { return connOpen(c) }, dialledClock(c))
}

// tcpAddrPort is a's address and port (zero if a is not a TCP address).
func tcpAddrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	return netip.AddrPort{}
}

// connOpen reports whether c is not closed yet, without a system call.
func connOpen(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	return err == nil && rc.Control(func(uintptr) {}) == nil
}

// useDatapath has picks that find the range busy toward a server take
// the port of one of its pairs that ended in dp (portReuse.reclaim).
func (h *portHolder) useDatapath(dp *datapath.Datapath) {
	if a := h.alloc.Load(); a != nil {
		a.SetReclaim(func(server netip.AddrPort) bool { return h.reuse.reclaim(dp, a, server) })
	}
}

// ended queues the pair of ev, a TIME_WAIT or a reset, for reuse if its
// port is the range's.
func (h *portHolder) ended(dp *datapath.Datapath, ev datapath.Event) {
	if ev.Kind != datapath.EventTimeWait && ev.Kind != datapath.EventReset {
		return
	}
	spec, err := dp.Spec(ev.Pair)
	if err == nil && h.claimed(spec.B) {
		h.reuse.noteEnded(spec.B, datapath.Now())
	}
}

// sweep gives back the leases of closed connections and forgets the
// ended pairs swept meanwhile, at every sweep.
func (h *portHolder) sweep() {
	if a := h.alloc.Load(); a != nil {
		a.Reap(time.Now())
	}
	h.reuse.prune(datapath.Now())
}

// claimed reports whether the pair whose B tuple is b has its local
// port held by the allocator while it is in the table (it was dialled
// from the range, and the range is reserved): its sockets then hold
// nothing the pair needs.
func (h *portHolder) claimed(b datapath.Tuple) bool {
	a := h.alloc.Load()
	return a != nil && a.Range().Contains(b.Dst.Port())
}

// Pairs an engine adopted from an earlier process (ip with a pin directory): listed in /flows under the listener they arrived on, waited for at shutdown, and left to the next process after an upgrade.

package forwarder

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/splicer/splicer/engine"
)

// LeaveSplicedPairs tells the engines whose spliced pairs can outlive the
// process (engine.Outliving) to leave them forwarding at shutdown, for the
// next process to adopt, instead of closing them. The daemon calls it once
// the new process of an upgrade serves.
func (f *Forwarder) LeaveSplicedPairs() {
	f.mu.Lock()
	f.leave = true
	f.mu.Unlock()
	for _, e := range f.engines.Engines {
		if o, ok := e.(engine.Outliving); ok {
			o.LeavePairs()
		}
	}
}

// adoptedFlows lists the engines' adopted pairs as /flows shows them: no
// pair ID (they are no pair of this forwarder), the engine's counters and
// state, and their age since adoption.
func (f *Forwarder) adoptedFlows() []Flow {
	var out []Flow
	for _, e := range f.engines.Engines {
		a, ok := e.(engine.Adopting)
		if !ok {
			continue
		}
		for _, p := range a.Adopted() {
			out = append(out, Flow{
				Listener: f.listenerAt(p.Local), Client: p.Client.String(), Upstream: p.Server.String(),
				Engine: e.Name(), Note: "adopted from an earlier process", State: p.State.String(),
				BytesUp: p.Bytes[engine.Up], BytesDown: p.Bytes[engine.Down], AgeS: uptime(p.Adopted), Adopted: true,
			})
		}
	}
	return out
}

// adoptedOpen is how many adopted pairs the engines still follow.
func (f *Forwarder) adoptedOpen() int {
	n := 0
	for _, e := range f.engines.Engines {
		if a, ok := e.(engine.Adopting); ok {
			n += len(a.Adopted())
		}
	}
	return n
}

// waitAdopted waits, at shutdown, until no adopted pair is left or ctx ends.
func (f *Forwarder) waitAdopted(ctx context.Context) {
	for f.adoptedOpen() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listenerAt names the listener whose address local is, or "".
func (f *Forwarder) listenerAt(local netip.AddrPort) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.listeners {
		host, port, err := net.SplitHostPort(l.cfg.Listen)
		if err != nil || port != strconv.Itoa(int(local.Port())) {
			continue
		}
		if host == "" {
			return l.cfg.Name
		}
		if a, err := netip.ParseAddr(host); err == nil && (a.IsUnspecified() || a.Unmap() == local.Addr().Unmap()) {
			return l.cfg.Name
		}
	}
	return ""
}

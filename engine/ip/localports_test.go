// Tests of the local port range across processes: an engine keeps the ports of pairs another live engine forwards from the same pin directory out of its picks.

package ip

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

// TestEngineSkipsPortsOfAnotherProcess: as the two processes of an
// upgrade, a first engine splices a pair with a pin directory and goes on
// forwarding it; a second engine with the same directory, whose port
// range starts at that pair's local port, never picks it toward that
// server (it reads the first one's pinned flows), but does toward
// another server. A third, whose range is that port alone, has none
// toward that server, which it counts as local_ports_exhausted.
func TestEngineSkipsPortsOfAnotherProcess(t *testing.T) {
	pinDir := filepath.Join(testenv.MountBPFFS(t), "splicer", "test")
	el := newEngineLab(t, Options{MaxPairs: 16, PinDir: pinDir})
	lp := el.pair(t, origin.Echo)
	up := lp.p.Upstream()
	local := up.LocalAddr().(*net.TCPAddr).AddrPort()
	server := up.RemoteAddr().(*net.TCPAddr).AddrPort()
	ctx, cancel := context.WithCancel(context.Background())
	done := el.splice(t, ctx, lp, engine.Both(0))
	t.Cleanup(func() { cancel(); <-done })

	next := New(Options{MaxPairs: 16, PinDir: pinDir, LocalPorts: PortRange{Low: local.Port(), High: local.Port() + 1}}, testenv.Logger(t))
	t.Cleanup(func() { next.Close() })
	if err := el.l.Fwd.Do(next.Probe); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	for range 4 {
		p, ok := next.UpstreamPort(server)
		if !ok || p == local.Port() {
			t.Fatalf("picked %d (%v) toward %v, whose port %d the first engine's pair uses", p, ok, server, local.Port())
		}
		next.UpstreamDialled(server, p, nil) // no dial: given back
	}
	other := netip.AddrPortFrom(server.Addr(), server.Port()+1)
	seen := false
	for range 2 {
		p, _ := next.UpstreamPort(other)
		seen = seen || p == local.Port()
		next.UpstreamDialled(other, p, nil)
	}
	if !seen {
		t.Errorf("port %d never picked toward another server %v", local.Port(), other)
	}

	full := New(Options{MaxPairs: 16, PinDir: pinDir, LocalPorts: PortRange{Low: local.Port(), High: local.Port()}}, testenv.Logger(t))
	t.Cleanup(func() { full.Close() })
	if err := el.l.Fwd.Do(full.Probe); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if p, ok := full.UpstreamPort(server); ok {
		t.Errorf("picked %d toward %v from a range whose one port the first engine's pair uses", p, server)
	}
	if n := full.Counters()["local_ports_exhausted"]; n != 1 {
		t.Errorf("local_ports_exhausted %d, want 1", n)
	}
}

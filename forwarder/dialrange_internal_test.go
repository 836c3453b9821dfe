// dialFromRange: how many connects a dial makes when the local ports it is given, or the kernel's, are in use, and how it waits for one to free up.

package forwarder

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
)

// fixedPorts is an engine.UpstreamPorts that always gives port, or
// always refuses (the range is exhausted toward every server).
type fixedPorts struct {
	port uint16
	ok   bool
}

func (p fixedPorts) UpstreamPort(netip.AddrPort) (uint16, bool) { return p.port, p.ok }

func (p fixedPorts) UpstreamDialled(netip.AddrPort, uint16, *net.TCPConn) {}

// socketConn is a syscall.RawConn over a real, unconnected socket, for
// sockopt.Control to bind.
type socketConn struct{ fd int }

func (c socketConn) Control(f func(fd uintptr)) error  { f(uintptr(c.fd)); return nil }
func (c socketConn) Read(func(fd uintptr) bool) error  { return nil }
func (c socketConn) Write(func(fd uintptr) bool) error { return nil }

// inUseDialer is a DialFunc that applies the dial's socket options (the
// local port) to a fresh socket, as the forwarder's dialler does, then
// fails as connect does on a 4-tuple in use; it counts the connects.
func inUseDialer(tb testing.TB, connects *int) DialFunc {
	tb.Helper()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		*connects++
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		defer unix.Close(fd)
		if err := sockopt.Control(ctx, "tcp4", addr, socketConn{fd}); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("dial tcp %s: connect: %w", addr, syscall.EADDRNOTAVAIL)
	}
}

// TestDialFromExhaustedRangeConnectsOnce: when the engine has no port of
// its range left toward the server, the dial takes a kernel port; if that
// one is in use too, the try ends at once rather than asking the kernel 16
// more times. With range ports in use it still tries the next one, then
// the kernel's. (No wait for a port here: portWait is zero.)
func TestDialFromExhaustedRangeConnectsOnce(t *testing.T) {
	shortPortWait(t, 0)
	for _, tc := range []struct {
		name  string
		ports fixedPorts
		want  int
	}{
		{"range exhausted", fixedPorts{}, 1},
		// Port 0: the bind takes any port, which is all the test needs.
		{"range ports in use", fixedPorts{port: 0, ok: true}, portTries + 1},
	} {
		connects := 0
		s := &session{l: &listener{f: &Forwarder{dial: inUseDialer(t, &connects)}, ports: tc.ports}}
		if _, err := s.dialFromRange(context.Background(), "192.0.2.1:80"); !sockopt.IsPortInUse(err) {
			t.Errorf("%s: dial failed with %v, want the port in use", tc.name, err)
		}
		if connects != tc.want {
			t.Errorf("%s: %d connects, want %d", tc.name, connects, tc.want)
		}
	}
}

// shortPortWait sets portWait to wait, and the pauses to a millisecond,
// until the test ends.
func shortPortWait(tb testing.TB, wait time.Duration) {
	tb.Helper()
	w, p, m := portWait, portPause, portPauseMax
	portWait, portPause, portPauseMax = wait, time.Millisecond, time.Millisecond
	tb.Cleanup(func() { portWait, portPause, portPauseMax = w, p, m })
}

// freeingPorts is an engine.UpstreamPorts whose range is exhausted for
// its first refusals picks, as while every ended pair's port is still
// too fresh to take again, then gives port.
type freeingPorts struct {
	port     uint16
	refusals atomic.Int32
	refused  atomic.Bool // the latest pick was refused
}

func (p *freeingPorts) UpstreamPort(netip.AddrPort) (uint16, bool) {
	if p.refusals.Add(-1) >= 0 {
		p.refused.Store(true)
		return 0, false
	}
	p.refused.Store(false)
	return p.port, true
}

func (p *freeingPorts) UpstreamDialled(netip.AddrPort, uint16, *net.TCPConn) {}

// TestDialWaitsForAPortWhenAllAreInUse: at more new pairs a second than
// the range carries, every port of it is busy toward the server and so
// are the kernel's (held for engine ip's pairs in TIME_WAIT). The dial
// waits for a range port to free up and connects from it, rather than
// failing, which would reset the client whose bytes the forwarder holds.
func TestDialWaitsForAPortWhenAllAreInUse(t *testing.T) {
	shortPortWait(t, 10*time.Second)
	server := rawListener(t)
	ports := &freeingPorts{port: freePort(t)}
	ports.refusals.Store(5)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialQuiet(ctx, network, addr)
		if err == nil && ports.refused.Load() {
			c.Close() // the kernel's port: its range is in use too
			return nil, fmt.Errorf("dial tcp %s: connect: %w", addr, syscall.EADDRNOTAVAIL)
		}
		return c, err
	}
	s := &session{l: &listener{f: &Forwarder{dial: dial}, ports: ports}}
	c, err := s.dialFromRange(context.Background(), server)
	if err != nil {
		t.Fatalf("dial failed with every port busy for a moment: %v", err)
	}
	defer c.Close()
	if got := c.LocalAddr().(*net.TCPAddr).Port; got != int(ports.port) {
		t.Errorf("connected from port %d, want the range's %d", got, ports.port)
	}
}

// lateRangePorts is an engine.LateUpstreamPorts that hands out port and
// records how it was told of each connection.
type lateRangePorts struct {
	port                    uint16
	dialled, late, splicing []*net.TCPConn
}

func (p *lateRangePorts) UpstreamPort(netip.AddrPort) (uint16, bool) { return p.port, true }

func (p *lateRangePorts) UpstreamDialled(_ netip.AddrPort, _ uint16, c *net.TCPConn) {
	if c != nil {
		p.dialled = append(p.dialled, c)
	}
}

func (p *lateRangePorts) UpstreamDialledLate(_ netip.AddrPort, _ uint16, c *net.TCPConn) {
	p.late = append(p.late, c)
}

func (p *lateRangePorts) UpstreamSplicing(c *net.TCPConn) { p.splicing = append(p.splicing, c) }

// TestTCPDialReadsTheClockOnlyBeforeASplice: a tcp listener's upstream
// dialled from the engine's range is settled without what only a splice
// by that engine needs (engine ip's timestamp clock: two getsockopts a
// connection), which the engine is told only before a deeper splice;
// a listener whose upstreams go to a pool settles them in full.
func TestTCPDialReadsTheClockOnlyBeforeASplice(t *testing.T) {
	server := rawListener(t)
	for _, tc := range []struct {
		proxy string
		late  bool
	}{{"tcp", true}, {"http-reverse", false}} {
		ports := &lateRangePorts{port: freePort(t)}
		l := &listener{f: &Forwarder{dial: dialQuiet}, ports: ports}
		l.cfg.Proxy = tc.proxy
		l.clockLate = tc.proxy == "tcp"
		s := &session{l: l, p: engine.NewPair(1, "t", nil)}
		c, err := s.dialFromRange(context.Background(), server)
		if err != nil {
			t.Fatal(err)
		}
		tcp := c.(*net.TCPConn)
		s.p.SetUpstream(tcp)
		if tc.late {
			if len(ports.dialled) != 0 || len(ports.late) != 1 || len(ports.splicing) != 0 {
				t.Errorf("%s: told of the dial as dialled %d, late %d, splicing %d times; want late once", tc.proxy, len(ports.dialled), len(ports.late), len(ports.splicing))
			}
			s.beforeDeepSplice()
			s.beforeDeepSplice()
			if len(ports.splicing) != 1 || ports.splicing[0] != tcp {
				t.Errorf("%s: told of %d splicings before two deep splices, want one, of the upstream", tc.proxy, len(ports.splicing))
			}
		} else if len(ports.dialled) != 1 || len(ports.late) != 0 {
			t.Errorf("%s: told of the dial as dialled %d, late %d times; want dialled once", tc.proxy, len(ports.dialled), len(ports.late))
		}
		c.Close()
	}
}

// rawListener is a loopback listener that accepts and holds connections
// until the test ends; it returns its address.
func rawListener(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tb.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// freePort is a loopback port no socket uses now.
func freePort(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

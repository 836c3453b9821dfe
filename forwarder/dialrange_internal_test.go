// dialFromRange: how many connects a dial makes when the local ports it is given, or the kernel's, are in use.

package forwarder

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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
// one is in use too, it fails at once rather than asking the kernel 16
// more times. With range ports in use it still tries the next one, then
// the kernel's.
func TestDialFromExhaustedRangeConnectsOnce(t *testing.T) {
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

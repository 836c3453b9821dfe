// Benchmarks of Pick toward a server whose range is claimed, nearly or wholly.

package ports_test

import (
	"net/netip"
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/ports"
)

// fullRange is engines.ip.local_ports' default.
var fullRange = ports.Range{Low: 40000, High: 59999}

// claimAll claims every port of a's range toward server but the ports in
// keep.
func claimAll(tb testing.TB, a *ports.Allocator, server netip.AddrPort, keep ...uint16) {
	tb.Helper()
	r := a.Range()
	for p := int(r.Low); p <= int(r.High); p++ {
		a.Claim(server, uint16(p))
	}
	for _, p := range keep {
		a.Unclaim(server, p)
	}
}

// BenchmarkPickExhausted: every port of 20,000 claimed toward the server,
// as tens of thousands of spliced pairs in TIME_WAIT leave it.
func BenchmarkPickExhausted(b *testing.B) {
	a := ports.NewAllocator(fullRange)
	s := netip.MustParseAddrPort("10.99.2.2:5201")
	claimAll(b, a, s)
	b.ResetTimer()
	for b.Loop() {
		if _, ok := a.Pick(s); ok {
			b.Fatal("picked a port of an exhausted range")
		}
	}
}

// BenchmarkPickLastFree: one port of 20,000 left toward the server.
func BenchmarkPickLastFree(b *testing.B) {
	a := ports.NewAllocator(fullRange)
	s := netip.MustParseAddrPort("10.99.2.2:5201")
	claimAll(b, a, s, 50000)
	b.ResetTimer()
	for b.Loop() {
		if p, ok := a.Pick(s); !ok || p != 50000 {
			b.Fatal("did not pick the free port")
		}
		a.Release(s, 50000)
	}
}

// BenchmarkPickOtherServer: a server with no claims, while another has
// the whole range.
func BenchmarkPickOtherServer(b *testing.B) {
	a := ports.NewAllocator(fullRange)
	claimAll(b, a, netip.MustParseAddrPort("10.99.2.2:5201"))
	s := netip.MustParseAddrPort("10.99.2.3:5201")
	b.ResetTimer()
	for b.Loop() {
		p, ok := a.Pick(s)
		if !ok {
			b.Fatal("no port toward a server with no claims")
		}
		a.Release(s, p)
	}
}

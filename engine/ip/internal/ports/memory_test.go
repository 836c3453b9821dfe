// What the allocator keeps of a spliced pair for its life: its claim and the note of its connection.

package ports_test

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip/internal/ports"
)

// heapInUse is the live heap after a collection.
func heapInUse(tb testing.TB) uint64 {
	tb.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHeapPerClaim: a pair spliced toward a server keeps its port's claim
// and its connection's note (Dialled) for its life, the lease gone with
// the closed connection; with 20,000 idle pairs toward each of a few
// servers that is at most 40 bytes of heap a pair (maps keyed by server
// and port took about 110).
func TestHeapPerClaim(t *testing.T) {
	const servers, perServer = 5, 20000
	a := ports.NewAllocator(ports.Range{Low: 10000, High: 10000 + perServer - 1})
	closed := func() bool { return false }
	before := heapInUse(t)
	for s := range servers {
		srv := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 99, 2, byte(s + 1)}), 80)
		for i := range perServer {
			if i%1000 == 0 {
				a.Reap(time.Now()) // as the engine's sweep, every second
			}
			p, ok := a.Pick(srv)
			if !ok {
				t.Fatalf("no port for pair %d toward %v", a.Claimed(), srv)
			}
			a.Dialled(srv, p, closed, ports.Note{V: uint32(p), Flag: true})
			a.Claim(srv, p)
		}
	}
	a.Reap(time.Now()) // the connections are closed: their leases go

	if n := a.Leased(); n != 0 {
		t.Fatalf("%d leases left after the reap", n)
	}
	per := float64(int64(heapInUse(t))-int64(before)) / (servers * perServer)
	t.Logf("%.1f bytes of heap per claimed port with its note", per)
	if per > 40 {
		t.Errorf("the allocator keeps %.0f bytes per claimed port and note: want at most 40", per)
	}
	srv := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 99, 2, 1}), 80)
	if n, ok := a.NoteOf(srv, 10007); !ok || n.V != 10007 || !n.Flag {
		t.Errorf("NoteOf(%v, 10007) = %+v, %v: want the note Dialled", srv, n, ok)
	}
	runtime.KeepAlive(a)
}

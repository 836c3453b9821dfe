// Benchmarks of what a new connection costs the forwarder: accept, dial, a short exchange and close, as connection churn (a request per connection) makes it.

package forwarder_test

import (
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// BenchmarkConnChurn is a connection per request through a tcp listener
// on loopback, as wrk -H 'Connection: close' makes them: the client sends
// a request, the server answers 1 KiB and closes, the client closes. The
// forwarder logs at warn, as a daemon does. allocs/op and cpu-ns/op are
// the whole process's, client and server included (the same for every
// engine and every version of the forwarder). Run it in a network
// namespace of its own (ip netns exec) to keep engine ip's port range off
// the host's.
func BenchmarkConnChurn(b *testing.B) {
	for _, name := range []string{copyengine.Name, "auto"} {
		b.Run(name, func(b *testing.B) { benchConnChurn(b, name, 1024) })
	}
}

func benchConnChurn(b *testing.B, engineName string, size int) {
	server := serveClosing(b, size)
	lc := fwdtest.TCP("t", server)
	lc.Engine = engineName
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := fwdtest.StartWith(b, forwarder.Options{Log: log}, lc)
	addr := f.Addr("t").String()
	req := []byte("GET /obj/1024 HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
	b.ReportAllocs()
	b.SetParallelism(4)
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		for pb.Next() {
			if n, err := churnExchange(addr, req, buf); err != nil || n != size {
				b.Errorf("exchange: %d bytes, err %v; want %d", n, err, size)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// churnExchange connects to addr, sends req and reads the answer to EOF.
func churnExchange(addr string, req, buf []byte) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := c.Read(buf)
		total += n
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// serveClosing answers every connection on a loopback port with size
// bytes once it has read something, then closes it, as an HTTP server
// does for Connection: close; it returns the address.
func serveClosing(tb testing.TB, size int) string {
	tb.Helper()
	body := make([]byte, size)
	return fwdtest.RawBackend(tb, func(c net.Conn) {
		buf := make([]byte, 512)
		if _, err := c.Read(buf); err != nil {
			return
		}
		c.Write(body)
	})
}

// processCPU is the process's user and system CPU time so far, in ns.
func processCPU(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestConnChurnAllocations bounds what a connection through a tcp
// listener with engine copy allocates, client and server included, from
// accept to close: a pair spliced by the forwarder's own copy engine sets
// no callbacks of deeper engines, and its splice registers nothing with
// the listener's context. It took 108 before these changes, 97 after.
func TestConnChurnAllocations(t *testing.T) {
	server := serveClosing(t, 1024)
	lc := fwdtest.TCP("t", server)
	lc.Engine = copyengine.Name
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := fwdtest.StartWith(t, forwarder.Options{Log: log}, lc)
	addr := f.Addr("t").String()
	req := []byte("GET /obj/1024 HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
	buf := make([]byte, 4096)
	exchange := func() {
		if n, err := churnExchange(addr, req, buf); err != nil || n != 1024 {
			t.Fatalf("exchange: %d bytes, err %v; want 1024", n, err)
		}
	}
	exchange()
	allocs := testing.AllocsPerRun(300, exchange)
	t.Logf("%.1f allocations per connection", allocs)
	if allocs > 101 {
		t.Errorf("a connection allocates %.1f times, want at most 101", allocs)
	}
}

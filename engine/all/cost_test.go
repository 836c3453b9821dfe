// Benchmarks of what the engines auto starts a pair on cost per short pair and per byte, which the promotion defaults weigh against ip's splice.

package all

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/splicer/splicer/engine"
	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/pipe"
)

// BenchmarkShortPair is one short exchange per pair (1 KiB each way, then
// both sides close), forwarded by copy and by pipe on loopback: what a
// pair that never earns a promotion costs on the engine it starts on.
// Making the connections is not timed, but counts in cpu-ns/op (the
// same for both).
func BenchmarkShortPair(b *testing.B) {
	for _, e := range []engine.Engine{copyengine.New(0), pipe.New(0)} {
		b.Run(e.Name(), func(b *testing.B) {
			defer e.Close()
			ln := listen(b)
			msg := make([]byte, 1024)
			cpu0 := cpuTime(b)
			for range b.N {
				b.StopTimer()
				p, client, server := pairOn(b, ln)
				b.StartTimer()
				done := make(chan error, 1)
				go func() { done <- echoOnce(server, msg) }()
				client.Write(msg)
				client.CloseWrite()
				if _, err := e.Splice(context.Background(), p, engine.Both(0)); err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, client); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				p.CloseConns()
				client.Close()
				server.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkBulk is 16 MiB one way through copy and pipe, and straight
// from client to server (direct): the process's CPU per byte (cpu-ns/B)
// of an engine less direct's is the per-byte cost a pair pays for
// staying off ip.
func BenchmarkBulk(b *testing.B) {
	const size = 16 << 20
	for _, e := range []engine.Engine{nil, copyengine.New(0), pipe.New(0)} {
		name := "direct"
		if e != nil {
			name = e.Name()
		}
		b.Run(name, func(b *testing.B) {
			ln := listen(b)
			chunk := make([]byte, 256<<10)
			b.SetBytes(size)
			cpu0 := cpuTime(b)
			for range b.N {
				b.StopTimer()
				p, client, server := pairOn(b, ln)
				if e == nil {
					p.CloseConns()
					client, server = connOn(b, ln)
				}
				b.StartTimer()
				go func() {
					for n := 0; n < size; n += len(chunk) {
						client.Write(chunk)
					}
					client.CloseWrite()
				}()
				got := make(chan int64, 1)
				go func() { n, _ := io.Copy(io.Discard, server); got <- n }()
				if e != nil {
					server.CloseWrite()
					if _, err := e.Splice(context.Background(), p, engine.Both(0)); err != nil {
						b.Fatal(err)
					}
				}
				if n := <-got; n != size {
					b.Fatalf("server got %d bytes, want %d", n, size)
				}
				b.StopTimer()
				p.CloseConns()
				client.Close()
				server.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N*size), "cpu-ns/B")
			if e != nil {
				e.Close()
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// echoOnce reads c until EOF, answers with msg and closes its side.
func echoOnce(c *net.TCPConn, msg []byte) error {
	if _, err := io.Copy(io.Discard, c); err != nil {
		return err
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	return c.CloseWrite()
}

func listen(tb testing.TB) *net.TCPListener {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// pairOn connects a client and a server through two forwarder sockets
// accepted on ln; the caller closes all four.
func pairOn(tb testing.TB, ln *net.TCPListener) (p *engine.Pair, client, server *net.TCPConn) {
	tb.Helper()
	fwdClient, client := connOn(tb, ln)
	server, fwdUp := connOn(tb, ln)
	p = engine.NewPair(1, "bench", fwdClient)
	p.SetUpstream(fwdUp)
	return p, client, server
}

// connOn connects to ln: the accepted end, then the dialled one.
func connOn(tb testing.TB, ln *net.TCPListener) (accepted, dialled *net.TCPConn) {
	tb.Helper()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	return a, d
}

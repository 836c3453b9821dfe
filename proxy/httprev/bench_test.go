// Go benchmark of the HTTP request path on loopback: GETs over one keep-alive connection through http-reverse, 1 KiB to 1 MiB, and a connection per request (profile it with -cpuprofile).

package httprev_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/origin"
)

// BenchmarkHTTPReverse1KiB is the small-object path alone, the one to profile.
func BenchmarkHTTPReverse1KiB(b *testing.B) { benchReverse(b, 1<<10) }

// BenchmarkHTTPReverse is a request per size of the switch benchmarks.
func BenchmarkHTTPReverse(b *testing.B) {
	for _, size := range []int64{1 << 10, 10 << 10, 64 << 10, 100 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchReverse(b, size) })
	}
}

// BenchmarkHTTPReverseConnClose is a client that opens a connection per
// request (Connection: close, as wrk -H 'Connection: close'): a 1 KiB GET
// on a new connection each time, read to the proxy's close. Its
// allocations are the whole process's, the client's dial included.
func BenchmarkHTTPReverseConnClose(b *testing.B) {
	body := strings.Repeat("x", 1<<10)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nContent-Type: application/octet-stream\r\n\r\n" + body)
	addr := reverseAnswering(b, resp)
	req := []byte("GET /obj/1024 HTTP/1.1\r\nHost: app.example\r\nUser-Agent: wrk\r\nConnection: close\r\n\r\n")
	buf := make([]byte, 4<<10)
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for range b.N {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		n := 0
		for err == nil {
			var k int
			k, err = c.Read(buf[n:])
			n += k
		}
		c.Close()
		if err != io.EOF || n < len(resp) {
			b.Fatalf("%d bytes, then %v; want the response and EOF", n, err)
		}
	}
}

func benchReverse(b *testing.B, size int64) {
	up := fwdtest.HTTPOrigin(b)
	c := dialReverse(b, "pipe", up)
	r := bufio.NewReader(c)
	req := []byte("GET " + origin.ObjectPath(size) + " HTTP/1.1\r\nHost: app.example\r\n\r\n")
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, resp.Body); n != size {
			b.Fatalf("%d bytes, want %d", n, size)
		}
		resp.Body.Close()
	}
}

// reportCPU reports, when the returned function runs, the process's CPU
// time per operation (client, proxy and origin together): steadier than
// wall time on a shared machine, and what differs between two builds is
// the proxy's.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

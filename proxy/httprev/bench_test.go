// Go benchmark of the HTTP request path on loopback: GETs over one keep-alive connection through http-reverse, 1 KiB to 1 MiB (profile it with -cpuprofile).

package httprev_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
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

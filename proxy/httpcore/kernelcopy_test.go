// A body http-reverse relays in control mode goes through the kernel where the client's congestion control does not pace (cubic), through the proxy's buffer where it does (bbr); either way every byte arrives, and a body cut short or stalled never looks whole.

package httpcore_test

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

func TestLabCopiedBodyWayFollowsCongestionControl(t *testing.T) {
	for _, tc := range []struct {
		cc     string
		kernel bool
	}{{"cubic", true}, {"bbr", false}} {
		t.Run(tc.cc, func(t *testing.T) {
			l := httplab.New(t)
			if err := l.SetCC(tc.cc); err != nil {
				t.Skipf("congestion control %s: %v", tc.cc, err)
			}
			httplab.ServeOrigin(t, l, httplab.ServerAddr(l, 8001))
			httplab.ServeHTTP(t, l, httplab.ServerAddr(l, 8002), http.HandlerFunc(serveShortBody))
			lc := httplab.Listener("rev", httplab.FwdAddr(l, 8090), "http-reverse")
			lc.Engine = "pipe"
			lc.IdleTimeout = config.Duration(300 * time.Millisecond)
			lc.Routes = []config.Route{{PathPrefix: "/short/", Pool: "short"}, {Pool: "p"}}
			lc.Pools = []config.Pool{
				{Name: "p", Servers: config.Servers(httplab.ServerAddr(l, 8001))},
				{Name: "short", Servers: config.Servers(httplab.ServerAddr(l, 8002))},
			}
			f := httplab.Start(t, l, lc)
			c := httplab.Dial(t, l, httplab.FwdAddr(l, 8090))
			c.SetDeadline(time.Now().Add(20 * time.Second))
			got := &countingReader{r: c}
			br := bufio.NewReader(got)
			// 64 KiB is copied whatever the congestion control; 100 and
			// 400 KiB go by it (400 KiB in two parts of at most 256 KiB).
			for _, size := range []int64{64 << 10, 100 << 10, 400 << 10, 100 << 10} {
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", origin.ObjectPath(size))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%d bytes: %v", size, err)
				}
				h := sha256.New()
				if n, err := io.Copy(h, resp.Body); err != nil || n != size {
					t.Fatalf("%d bytes: read %d, %v", size, n, err)
				}
				if [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
					t.Fatalf("%d bytes: the body differs from the origin's", size)
				}
			}
			way := func(w string) float64 {
				return f.Metric("splicer_http_response_bytes_total", "listener", "rev", "way", w)
			}
			// The answer is counted once it is sent, which the client
			// may see first.
			testenv.Eventually(t, "every byte the client read counted by its way", func() bool {
				return way("copied")+way("kernel")+way("spliced") == float64(got.n)
			})
			kernel := way("kernel")
			t.Logf("under %s: %v bytes in the kernel, %v copied, of %d", tc.cc, kernel, way("copied"), got.n)
			// Past the first read (16 KiB at most), 100, 400 and 100 KiB.
			if least := float64(600<<10 - 3*16<<10); tc.kernel && kernel < least {
				t.Errorf("under %s, %v bytes moved in the kernel; want at least %v", tc.cc, kernel, least)
			}
			if !tc.kernel && kernel != 0 {
				t.Errorf("under %s, %v bytes moved in the kernel; want every body through the buffer", tc.cc, kernel)
			}
			for _, path := range []string{"/short/cut", "/short/stall"} {
				checkShortBody(t, httplab.Dial(t, l, httplab.FwdAddr(l, 8090)), path)
			}
		})
	}
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// shortBody is what serveShortBody declares, and sent what it sends.
const shortBody, shortSent = 400 << 10, 100 << 10

// serveShortBody declares a body of shortBody bytes and sends shortSent,
// then closes the connection (/short/cut) or keeps it silent for 3 s
// (/short/stall).
func serveShortBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", fmt.Sprint(shortBody))
	w.Write(make([]byte, shortSent))
	w.(http.Flusher).Flush()
	if r.URL.Path == "/short/stall" {
		time.Sleep(3 * time.Second)
	}
	if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
		c.Close()
	}
}

// checkShortBody asks for path on c: the client must see the body end
// early (a stalled one at the listener's idle_timeout, 300 ms), never
// whole.
func checkShortBody(tb testing.TB, c *net.TCPConn, path string) {
	tb.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n >= shortBody {
		tb.Errorf("%s: read %d of %d bytes, %v: a short body looked whole", path, n, shortBody, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		tb.Errorf("%s: the body ended after %v; idle_timeout is 300 ms", path, d)
	}
}

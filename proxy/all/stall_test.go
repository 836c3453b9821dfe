// A peer that stalls in the middle of a body the proxy streams in control mode (chunked, or with a length http-reverse copies) is cut after idle_timeout instead of holding the pair.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

func TestStalledChunkedBodyTimesOut(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, idle_timeout: 300ms, destinations: {allow: ['127.0.0.1']}}
  - {name: http-reverse, listen: '127.0.0.1:0', proxy: http-reverse, idle_timeout: 300ms, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, idle_timeout: 300ms, upstream: ['%[1]s']}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			c, err := net.Dial("tcp", f.Addr(l.Name).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			target := fwdtest.RequestTarget(l, up, "/obj/10")
			// Half a chunk, then silence.
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", target, up)
			start := time.Now()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.ReadAll(c)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("a stalled chunked body held the pair %v with idle_timeout 300ms", d)
			}
		})
	}
}

// TestStalledLengthBodyTimesOut: an upstream that sends 100 KiB of a
// 400 KiB response body and then nothing, its connection open: the rest,
// which http-reverse relays in control mode (below the engines' floor;
// through the kernel or its buffer, kernelcopy_test.go), ends at
// idle_timeout, and the client never sees the body whole.
func TestStalledLengthBodyTimesOut(t *testing.T) {
	const size, sent = 400 << 10, 100 << 10
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(make([]byte, sent))
		time.Sleep(8 * time.Second) // silence, the connection open
	})
	cfg := fwdtest.Config(t, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, idle_timeout: 300ms, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	c, err := net.Dial("tcp", f.Addr("rev").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /obj HTTP/1.1\r\nHost: app.example\r\n\r\n")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled body held the pair %v with idle_timeout 300ms", d)
	}
	if err == nil || n >= size {
		t.Errorf("the client read %d bytes of %d and %v: a cut body looked whole", n, size, err)
	}
	t.Logf("cut after %v with %d bytes read: %v", time.Since(start).Round(time.Millisecond), n, err)
}

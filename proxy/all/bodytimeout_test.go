// Tests that a request body the client stops sending gets 408 after http.body_timeout, through every HTTP kind.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

// TestStalledRequestBodiesGet408: a client that stops sending its request
// body, inside a chunk, between chunks, short of its length or past the
// size the proxy splices, gets 408 once http.body_timeout passes without
// a byte of it, from every HTTP kind. The back end reads the request and
// waits for the rest of the body, as an application server does.
func TestStalledRequestBodiesGet408(t *testing.T) {
	up := fwdtest.RawBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	listeners := fwdtest.HTTPListeners(t, up)
	const bodyTimeout = time.Second
	for i := range listeners {
		// A response timeout as short must not make the stall the
		// upstream's (a 504): the response's wait begins after the body.
		listeners[i].HTTP = &config.HTTP{BodyTimeout: config.Duration(bodyTimeout), ResponseTimeout: config.Duration(bodyTimeout)}
	}
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]string{
		"short of its length": "Content-Length: 100\r\n\r\nhello",
		"inside a chunk":      "Transfer-Encoding: chunked\r\n\r\n5\r\nhel",
		"between chunks":      "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		// Past the 512 KiB that http-reverse copies itself: the body goes
		// to the listener's engine, which finds nothing moving.
		"spliced": "Content-Length: 1048576\r\n\r\n" + strings.Repeat("x", 64<<10),
	}
	for _, l := range listeners {
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
		for name, body := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				t.Parallel()
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s", target, up, body)
				start := time.Now()
				resp := fwdtest.Exchange(t, f.Addr(l.Name).String(), raw)
				took := time.Since(start)
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("%s through %s: %s after %v, want 408", name, l.Proxy, resp.Status, took)
				}
				if took < bodyTimeout {
					t.Errorf("408 after %v: before the body timeout of %v", took, bodyTimeout)
				}
			})
		}
	}
}

// TestBodyTimeoutEndsWithTheBody: body_timeout bounds only the wait for a
// body. After a whole body, a keep-alive connection of a listener whose
// idle_timeout is 0 (never) waits past body_timeout for its next request.
func TestBodyTimeoutEndsWithTheBody(t *testing.T) {
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	const bodyTimeout = 500 * time.Millisecond
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{BodyTimeout: config.Duration(bodyTimeout)}
		listeners[i].IdleTimeout = 0
	}
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		t.Run(l.Name, func(t *testing.T) {
			t.Parallel()
			c := fwdtest.DialFor(t, f.Addr(l.Name).String(), 10*time.Second)
			defer c.Close()
			r := bufio.NewReader(c)
			for i := range 2 {
				if i > 0 {
					time.Sleep(3 * bodyTimeout)
				}
				// The body comes apart from the head, so that the proxy
				// waits for it under body_timeout.
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up)
				if _, err := c.Write([]byte(head)); err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				time.Sleep(bodyTimeout / 5)
				if _, err := c.Write([]byte("hello")); err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				if err := fwdtest.AnsweredLength(r, 5); err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
			}
		})
	}
}

// Silent connections cannot hold an HTTP listener: each kind closes a connection that sends no request within request_timeout of accept, so a sixth client gets through a listener capped at five.

package all_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

func TestSilentConnectionsTimeOut(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, max_connections: 5,
     http: {request_timeout: 500ms}, destinations: {allow: ['127.0.0.1']}}
  - {name: http-reverse, listen: '127.0.0.1:0', proxy: http-reverse, max_connections: 5,
     http: {request_timeout: 500ms}, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, max_connections: 5,
     http: {request_timeout: 500ms}, upstream: ['%[1]s']}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			addr := f.Addr(l.Name).String()
			start := time.Now()
			for range 5 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Each silent connection is closed by the forwarder.
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				go func() { c.Read(make([]byte, 1)) }()
			}
			target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
			deadline := time.Now().Add(5 * time.Second)
			for {
				status, err := tryGet(addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, up))
				if status == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a sixth client still not served after %v: %d, %v", time.Since(start), status, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// tryGet sends raw to addr and returns the response status, or the error
// of a connection the listener refused.
func tryGet(addr, raw string) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

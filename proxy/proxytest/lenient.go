// A lenient, counting origin for refusal tests: it answers 200 to any bytes at all, so only the proxy in front of it can refuse.

package proxytest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LenientOrigin is a raw TCP origin that refuses nothing. A refusal test
// sends a bad request through a proxy to it and asserts that no byte
// arrived: an origin with an HTTP parser of its own (net/http, the
// built-in origin) would answer many bad heads with its own 400, and a
// test against it would pass with the proxy's checks gone.
//
// Each connection is read until the peer has sent nothing for Quiet (a
// head, whatever body follows it, or bytes that are no HTTP at all), then
// answered "HTTP/1.1 200 OK" with a small body and closed.
type LenientOrigin struct {
	// Addr is the loopback host:port it listens on.
	Addr string
	// Quiet is how long a connection must be silent before it is answered.
	Quiet time.Duration

	conns, bytes, exchanges atomic.Int64

	mu       sync.Mutex            // guards received and open
	received []byte                // the first bytes received, for failure messages
	open     map[net.Conn]struct{} // closed at cleanup, so none holds it
}

// LenientBody is the body of every response of a LenientOrigin: a test
// that sees it knows the request went through.
const LenientBody = "lenient origin: accepted\n"

// lenientKeep is how many received bytes are kept for Received.
const lenientKeep = 4 << 10

// NewLenientOrigin starts a LenientOrigin on loopback, closed when the
// test ends.
func NewLenientOrigin(tb testing.TB) *LenientOrigin {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	o := &LenientOrigin{Addr: ln.Addr().String(), Quiet: 100 * time.Millisecond, open: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		o.mu.Lock()
		for c := range o.open {
			c.Close()
		}
		o.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.conns.Add(1)
			o.mu.Lock()
			o.open[c] = struct{}{}
			o.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				o.serve(c)
			}()
		}
	}()
	return o
}

// serve reads c until it goes quiet or closes, then answers 200 if
// anything arrived.
func (o *LenientOrigin) serve(c net.Conn) {
	defer func() {
		o.mu.Lock()
		delete(o.open, c)
		o.mu.Unlock()
		c.Close()
	}()
	var got []byte
	buf := make([]byte, 32<<10)
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		c.SetReadDeadline(time.Now().Add(o.Quiet))
		n, err := c.Read(buf)
		if n > 0 {
			o.record(buf[:n])
			got = append(got, buf[:n]...)
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && len(got) == 0 {
				continue // nothing yet: a proxy may connect before it sends
			}
			break
		}
	}
	if len(got) == 0 {
		return
	}
	o.exchanges.Add(1)
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
		strconv.Itoa(len(LenientBody)) + "\r\nConnection: close\r\n\r\n" + LenientBody))
}

// record counts b and keeps the first bytes received.
func (o *LenientOrigin) record(b []byte) {
	o.bytes.Add(int64(len(b)))
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := lenientKeep - len(o.received); room > 0 {
		o.received = append(o.received, b[:min(room, len(b))]...)
	}
}

// Conns is how many connections were accepted. A proxy may connect before
// it reads a request and refuses it; Bytes is what says nothing went on.
func (o *LenientOrigin) Conns() int64 { return o.conns.Load() }

// Bytes is how many bytes arrived, on all connections.
func (o *LenientOrigin) Bytes() int64 { return o.bytes.Load() }

// Requests is how many requests were answered: each connection that sent
// anything is answered once and closed.
func (o *LenientOrigin) Requests() int64 { return o.exchanges.Load() }

// Received is the first bytes that arrived (up to 4 KiB), for a failure
// message.
func (o *LenientOrigin) Received() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.received)
}

// Refused sends raw on a new connection to addr (a proxy in front of o),
// reads the response and waits (up to 2s) for the proxy to close, then fails tb if any
// byte reached o meanwhile: a request the proxy refuses must not reach the
// origin (a connection the proxy opened early, with nothing sent on it, is
// no request). It returns the response, its body read.
func (o *LenientOrigin) Refused(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	before := o.Bytes()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		tb.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err == nil {
		// The body, and on to the proxy's close (one that kept the
		// connection open passed the request on, and fails below).
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, r)
	}
	if n := o.Bytes() - before; n != 0 {
		tb.Errorf("%d bytes of %.200q reached the origin (it received %.200q), want none", n, raw, o.Received())
	}
	if err != nil {
		tb.Fatalf("response to %.200q: %v", raw, err)
	}
	return resp
}

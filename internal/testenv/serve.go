// Test servers and clients: run a handler on every connection a listener accepts, or hold every connection open, until the test ends; a connected loopback pair; a back end's request loop; a GET read whole.

package testenv

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// ServeEach runs serve, in a goroutine of its own, on every connection ln
// accepts until the test ends, when ln is closed. Each connection gives up
// after d and is closed when serve returns: a back end for tests that need
// answers no real server gives (a stall, a bad framing, a raw handshake).
func ServeEach(tb testing.TB, ln net.Listener, d time.Duration, serve func(c net.Conn)) {
	tb.Helper()
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(d))
				serve(c)
			}()
		}
	}()
}

// HoldEach hands every connection ln accepts to take, which runs in the
// accept loop (the next accept waits for it: a take that serves the
// connection starts a goroutine), and keeps every connection open until the returned stop is called, at the
// latest when the test ends; stop closes ln and every connection. It is
// the back end of tests that need connections left open: a server that
// stalls, or one whose connections the test drives itself.
func HoldEach(tb testing.TB, ln net.Listener, take func(c net.Conn)) (stop func()) {
	tb.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	stop = sync.OnceFunc(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	tb.Cleanup(stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			take(c)
		}
	}()
	return stop
}

// ListenLoopback is a TCP listener on a free 127.0.0.1 port.
func ListenLoopback(tb testing.TB) *net.TCPListener {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// FreeAddr is a loopback address with a port nothing listens on (yet).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln := ListenLoopback(tb)
	defer ln.Close()
	return ln.Addr().String()
}

// TCPPair returns the two ends of a fresh loopback TCP connection, the
// accepted one and the dialled one, both closed when the test ends.
func TCPPair(tb testing.TB) (accepted, dialled *net.TCPConn) {
	tb.Helper()
	ln := ListenLoopback(tb)
	defer ln.Close()
	dialled, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dialled.Close() })
	if accepted, err = ln.AcceptTCP(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { accepted.Close() })
	return accepted, dialled
}

// Get fetches url and returns the response with its body read, failing
// the test if the request or the read fails.
func Get(tb testing.TB, url string) (*http.Response, []byte) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return resp, body
}

// EachRequest is a back end's loop: it reads requests from r one after
// another, each with its body read whole, and hands them to serve until
// a read fails (the peer closed, or sent no whole request) or serve
// returns false.
func EachRequest(r *bufio.Reader, serve func(req *http.Request, body []byte) bool) {
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil || !serve(req, body) {
			return
		}
	}
}

// Test helpers: a served origin, TCP clients, a corrupting proxy and a goroutine leak check.

package origin

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// newServer returns a Server closed at the end of the test.
func newServer(tb testing.TB) *Server {
	tb.Helper()
	s := New(slog.New(slog.DiscardHandler))
	tb.Cleanup(func() { s.Close() })
	return s
}

// listen returns a loopback listener on a free port.
func listen(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// serve starts proto on a fresh listener of s and returns its address.
func serve(tb testing.TB, s *Server, proto Proto, opts ...Option) string {
	tb.Helper()
	l := listen(tb)
	if err := s.Serve(proto, l, opts...); err != nil {
		tb.Fatalf("Serve(%s): %v", proto, err)
	}
	return l.Addr().String()
}

// dial connects to addr, closing the connection at the end of the test.
func dial(tb testing.TB, addr string) *net.TCPConn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second)) // a hung test fails instead of hanging
	return c.(*net.TCPConn)
}

// corruptingProxy forwards connections to target, flipping one bit of the
// byte at offset flipUp of the client->target stream and at flipDown of the
// target->client stream; a negative offset flips nothing. Half-closes pass
// through. It returns the proxy's address.
func corruptingProxy(tb testing.TB, target string, flipUp, flipDown int64) string {
	tb.Helper()
	l := listen(tb)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			upstream, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, upstream)
			mu.Unlock()
			wg.Go(func() { copyFlipping(upstream, client, flipUp) })
			wg.Go(func() { copyFlipping(client, upstream, flipDown) })
		}
	})
	return l.Addr().String()
}

func copyFlipping(dst, src net.Conn, flip int64) {
	buf := make([]byte, 32<<10)
	var pos int64
	for {
		n, err := src.Read(buf)
		if flip >= pos && flip < pos+int64(n) {
			buf[flip-pos] ^= 0x01
		}
		pos += int64(n)
		if _, werr := dst.Write(buf[:n]); werr != nil {
			return
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				dst.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

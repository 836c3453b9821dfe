// Tests of sendNow and recvNow: they never block, whatever the descriptor's mode, and report a closed peer.

package httpcore

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

// blockingFD puts c's socket into blocking mode for the test and returns
// its descriptor: the raw calls must not rely on O_NONBLOCK.
func blockingFD(tb testing.TB, c *net.TCPConn) int {
	tb.Helper()
	var sock int
	if err := sockopt.WithFD(c, func(fd int) error {
		sock = fd
		return syscall.SetNonblock(fd, false)
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.SetNonblock(sock, true) })
	return sock
}

func TestRecvNowDoesNotWait(t *testing.T) {
	a, b := testenv.TCPPair(t)
	fd := blockingFD(t, a)
	buf := make([]byte, 16)
	if n, err := recvNow(fd, buf); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("recvNow on an empty socket: %d, %v; want EAGAIN", n, err)
	}
	b.Write([]byte("hi"))
	for {
		n, err := recvNow(fd, buf)
		if errors.Is(err, syscall.EAGAIN) {
			continue // not arrived yet
		}
		if err != nil || string(buf[:n]) != "hi" {
			t.Fatalf("recvNow: %q, %v", buf[:max(n, 0)], err)
		}
		return
	}
}

func TestSendNowStopsAtAFullBuffer(t *testing.T) {
	a, _ := testenv.TCPPair(t)
	fd := blockingFD(t, a)
	chunk := make([]byte, 64<<10)
	for range 10000 { // far more than any socket buffer
		if _, err := sendNow(fd, chunk); err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatalf("sendNow: %v; want EAGAIN once full", err)
			}
			return
		}
	}
	t.Fatal("sendNow never found the buffer full")
}

func TestSendNowToAClosedPeer(t *testing.T) {
	a, b := testenv.TCPPair(t)
	b.SetLinger(0)
	b.Close() // a reset
	fd := blockingFD(t, a)
	var err error
	for range 100 { // the first send may go out before the reset is seen
		if _, err = sendNow(fd, []byte("x")); err != nil && !errors.Is(err, syscall.EAGAIN) {
			break
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("sendNow to a reset peer: %v; want ECONNRESET or EPIPE", err)
	}
}

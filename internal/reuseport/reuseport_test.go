// The program spreads connections over a group's sockets in turn: 2n connections reach n sockets exactly twice each, where the kernel's hash would vary.

package reuseport

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

// group binds n sockets to one loopback address with SO_REUSEPORT.
func group(tb testing.TB, n int) ([]net.Listener, []*os.File) {
	tb.Helper()
	addr := "127.0.0.1:0"
	var lns []net.Listener
	var files []*os.File
	for range n {
		ln, err := sockopt.ListenReusePort("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { ln.Close() })
		addr = ln.Addr().String()
		f, err := handoff.Dup(ln.(*net.TCPListener))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.Close() })
		lns, files = append(lns, ln), append(files, f)
	}
	return lns, files
}

func TestSpreadTakesEachSocketInTurn(t *testing.T) {
	testenv.RequireRoot(t)
	const n, rounds = 4, 5
	lns, files := group(t, n)
	if err := Spread(files); err != nil {
		t.Fatal(err)
	}
	for range n * rounds {
		c, err := net.Dial("tcp", lns[0].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for i, ln := range lns {
		got := 0
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			c, err := ln.Accept()
			if err != nil {
				break
			}
			c.Close()
			got++
		}
		if got != rounds {
			t.Errorf("socket %d accepted %d of %d connections, want %d", i, got, n*rounds, rounds)
		}
	}
	// The sockets stay non-blocking: accept still honours a deadline.
	lns[0].(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := lns[0].Accept(); err == nil || !os.IsTimeout(err) {
		t.Errorf("accept on an empty socket after Spread: %v, want a timeout", err)
	}
}

func TestSpreadNeedsSockets(t *testing.T) {
	if err := Spread(nil); err == nil {
		t.Error("Spread of no sockets succeeded")
	}
}

// The program spreads connections over a group's sockets in turn (2n connections reach n sockets exactly twice each, where the kernel's hash would vary) or by client address (all of one address's connections reach one socket), and a group's mode can change while it runs.
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

// group binds n sockets to one address (host:0) with SO_REUSEPORT.
func group(tb testing.TB, addr string, n int) ([]net.Listener, []*os.File) {
	tb.Helper()
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

// spread attaches the program to files in mode; cleanup closes the Group.
func spread(tb testing.TB, files []*os.File, mode Mode) *Group {
	tb.Helper()
	g, err := Spread(files, mode)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
	})
	return g
}

// dial opens n connections to addr from the local address from (nil: any);
// cleanup closes them.
func dial(tb testing.TB, addr string, from net.IP, n int) {
	tb.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
	}
}

// accepted drains every socket of the group and returns, for each, the
// client addresses (IP only) of the connections it had queued.
func accepted(tb testing.TB, lns []net.Listener) [][]string {
	tb.Helper()
	got := make([][]string, len(lns))
	for i, ln := range lns {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			c, err := ln.Accept()
			if err != nil {
				if !os.IsTimeout(err) {
					tb.Fatalf("accept on socket %d: %v", i, err)
				}
				break
			}
			got[i] = append(got[i], c.RemoteAddr().(*net.TCPAddr).IP.String())
			c.Close()
		}
	}
	return got
}

// checkInTurn fails tb unless each socket took exactly rounds connections.
func checkInTurn(tb testing.TB, got [][]string, rounds int) {
	tb.Helper()
	for i, ips := range got {
		if len(ips) != rounds {
			tb.Errorf("in turn: socket %d accepted %d of %d connections, want %d", i, len(ips), len(got)*rounds, rounds)
		}
	}
}

// checkByClient fails tb unless every client address's perClient
// connections all reached one socket, and returns how many sockets took any.
func checkByClient(tb testing.TB, got [][]string, clients, perClient int) (used int) {
	tb.Helper()
	socketOf := map[string]int{}
	count := map[string]int{}
	for i, ips := range got {
		if len(ips) > 0 {
			used++
		}
		for _, ip := range ips {
			if j, ok := socketOf[ip]; ok && j != i {
				tb.Errorf("by client: connections from %s reached sockets %d and %d, want one", ip, j, i)
			}
			socketOf[ip] = i
			count[ip]++
		}
	}
	if len(count) != clients {
		tb.Errorf("by client: connections from %d addresses accepted, want %d (%v)", len(count), clients, count)
	}
	for ip, k := range count {
		if k != perClient {
			tb.Errorf("by client: %d connections from %s accepted, want %d", k, ip, perClient)
		}
	}
	return used
}

// loopback is 127.0.0.i, a local address like every address of 127/8.
func loopback(i int) net.IP { return net.IPv4(127, 0, 0, byte(i)) }

func TestSpreadTakesEachSocketInTurn(t *testing.T) {
	testenv.RequireRoot(t)
	const n, rounds = 4, 5
	lns, files := group(t, "127.0.0.1:0", n)
	spread(t, files, InTurn)
	dial(t, lns[0].Addr().String(), nil, n*rounds)
	checkInTurn(t, accepted(t, lns), rounds)
	// The sockets stay non-blocking: accept still honours a deadline.
	lns[0].(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := lns[0].Accept(); err == nil || !os.IsTimeout(err) {
		t.Errorf("accept on an empty socket after Spread: %v, want a timeout", err)
	}
}

// By client, each of 8 client addresses has its 3 connections on one of 4
// sockets, and the 8 do not all share one.
func TestSpreadByClientKeepsAClientOnOneSocket(t *testing.T) {
	testenv.RequireRoot(t)
	const n, clients, perClient = 4, 8, 3
	lns, files := group(t, "127.0.0.1:0", n)
	spread(t, files, ByClient)
	for i := 1; i <= clients; i++ {
		dial(t, lns[0].Addr().String(), loopback(i), perClient)
	}
	if used := checkByClient(t, accepted(t, lns), clients, perClient); used < 2 {
		t.Errorf("by client: %d client addresses all reached %d socket, want at least 2 sockets", clients, used)
	}
}

// IPv6: lo has only ::1, so the test checks one client address's
// connections reach one socket.
func TestSpreadByClientIPv6(t *testing.T) {
	testenv.RequireRoot(t)
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	const n, perClient = 4, 12
	lns, files := group(t, "[::1]:0", n)
	spread(t, files, ByClient)
	dial(t, lns[0].Addr().String(), net.IPv6loopback, perClient)
	checkByClient(t, accepted(t, lns), 1, perClient)
}

// SetMode switches a running group from in turn to by client and back.
// switchesModes sets g, a group of the sockets lns spreading in turn, to
// spread by client, then back in turn, checking the connections follow.
func switchesModes(tb testing.TB, g *Group, lns []net.Listener) {
	tb.Helper()
	const rounds, clients, perClient = 3, 8, 3
	addr := lns[0].Addr().String()
	if err := g.SetMode(ByClient); err != nil {
		tb.Fatal(err)
	}
	for i := 1; i <= clients; i++ {
		dial(tb, addr, loopback(i), perClient)
	}
	checkByClient(tb, accepted(tb, lns), clients, perClient)
	if err := g.SetMode(InTurn); err != nil {
		tb.Fatal(err)
	}
	dial(tb, addr, loopback(1), len(lns)*rounds)
	checkInTurn(tb, accepted(tb, lns), rounds)
}

func TestSetModeSwitchesARunningGroup(t *testing.T) {
	testenv.RequireRoot(t)
	const n, rounds = 4, 3
	lns, files := group(t, "127.0.0.1:0", n)
	g := spread(t, files, InTurn)
	addr := lns[0].Addr().String()

	dial(t, addr, loopback(1), n*rounds)
	checkInTurn(t, accepted(t, lns), rounds)

	switchesModes(t, g, lns)

	if err := g.SetMode(Mode(7)); err == nil {
		t.Error("SetMode of an unknown mode succeeded")
	}
}

// A group handed over by its file (as a master hands it across its
// execve) changes the mode of the program the first process attached.
func TestFromFileTakesOverTheMode(t *testing.T) {
	testenv.RequireRoot(t)
	lns, files := group(t, "127.0.0.1:0", 4)
	first := spread(t, files, InTurn)
	f, err := first.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first.Close() // the first process's handles are gone
	g, err := FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	switchesModes(t, g, lns)

	if _, err := FromFile(files[0]); err == nil {
		t.Error("FromFile of a listening socket succeeded")
	}
}

// Closing the Group leaves the program attached, in its last mode.
func TestGroupCloseLeavesTheProgram(t *testing.T) {
	testenv.RequireRoot(t)
	const n, rounds = 4, 2
	lns, files := group(t, "127.0.0.1:0", n)
	g, err := Spread(files, InTurn)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := g.SetMode(ByClient); err == nil {
		t.Error("SetMode after Close succeeded")
	}
	dial(t, lns[0].Addr().String(), nil, n*rounds)
	checkInTurn(t, accepted(t, lns), rounds)
}

func TestSpreadNeedsSockets(t *testing.T) {
	if _, err := Spread(nil, InTurn); err == nil {
		t.Error("Spread of no sockets succeeded")
	}
}

func TestSpreadRefusesAnUnknownMode(t *testing.T) {
	testenv.RequireRoot(t)
	_, files := group(t, "127.0.0.1:0", 2)
	if g, err := Spread(files, Mode(-1)); err == nil {
		g.Close()
		t.Error("Spread of an unknown mode succeeded")
	}
}

// A nil Group, kept where the program could not load, does nothing.
func TestNilGroup(t *testing.T) {
	var g *Group
	if err := g.SetMode(ByClient); err != nil {
		t.Errorf("SetMode of a nil Group: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close of a nil Group: %v", err)
	}
}

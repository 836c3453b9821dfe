// Handoff between two real processes (this test binary run again as the new process): the socket passes, a failed new process changes nothing.

package handoff

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// childMode selects what the test binary does when run as the new process.
const childMode = "HANDOFF_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childMode) {
	case "":
		os.Exit(m.Run())
	case "serve":
		os.Exit(serveInherited())
	case "fail":
		os.Exit(3)
	}
}

// serveInherited is the new process: it takes socket "a", says ready and
// answers one connection with "new".
func serveInherited() int {
	in, err := FromEnv()
	if err != nil || in == nil {
		return 10
	}
	ln, err := in.Listener("a", os.Getenv("HANDOFF_TEST_ADDR"))
	if err != nil || ln == nil {
		return 11
	}
	if in.Ready() != nil {
		return 12
	}
	c, err := ln.Accept()
	if err != nil {
		return 13
	}
	c.Write([]byte("new"))
	c.Close()
	return 0
}

func listenFile(tb testing.TB) (*net.TCPListener, *os.File) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	f, err := ln.File()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return ln, f
}

func TestHandoffPassesTheSocket(t *testing.T) {
	ln, f := listenFile(t)
	addr := ln.Addr().String()
	t.Setenv(childMode, "serve")
	t.Setenv("HANDOFF_TEST_ADDR", addr)
	child, err := Start(os.Args[0], nil, map[string]*os.File{"a": f}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The old process stops accepting: the socket lives on in the new one.
	ln.Close()
	f.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial after the old process closed its socket: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	if string(got) != "new" {
		t.Fatalf("answer %q, want the new process's", got)
	}
	if err := <-child.Exited(); err != nil {
		t.Fatalf("new process: %v", err)
	}
}

func TestHandoffFailedChildChangesNothing(t *testing.T) {
	ln, f := listenFile(t)
	t.Setenv(childMode, "fail")
	if _, err := Start(os.Args[0], nil, map[string]*os.File{"a": f}, 10*time.Second); err == nil {
		t.Fatal("Start of a process that exits at once succeeded")
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("old"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, _ := io.ReadAll(c)
	if string(got) != "old" {
		t.Fatalf("answer %q, want the old process's", got)
	}
}

func TestSameAddr(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(10, 99, 1, 1), Port: 7000}
	unspec := &net.TCPAddr{IP: net.IPv4zero, Port: 7000}
	for _, c := range []struct {
		bound net.Addr
		want  string
		same  bool
	}{
		{bound, "10.99.1.1:7000", true},
		{bound, "10.99.1.1:7001", false},
		{bound, "10.99.1.2:7000", false},
		{bound, "10.99.1.1:0", true},
		{unspec, ":7000", true},
		{unspec, "0.0.0.0:7000", true},
		{bound, ":7000", false},
	} {
		if got := sameAddr(c.bound, c.want); got != c.same {
			t.Errorf("sameAddr(%v, %q) = %v, want %v", c.bound, c.want, got, c.same)
		}
	}
}

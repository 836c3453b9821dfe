// Handoff between two real processes (this test binary run again as the new process): the socket passes, a failed new process changes nothing.

package handoff

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	f, err := Dup(ln)
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

// TestHandoffLeavesTheOldListenerNonBlocking: after a handoff the old
// process's accept loop, woken by a connection it wins, goes back to the
// poller, and closing its listener returns at once. With net's File as
// the duplicate, the exec turned the shared socket blocking: the loop's
// next accept waited in the kernel, and Close with it.
func TestHandoffLeavesTheOldListenerNonBlocking(t *testing.T) {
	ln, f := listenFile(t)
	t.Setenv(childMode, "fail")
	Start(os.Args[0], nil, map[string]*os.File{"a": f}, 10*time.Second) // only the exec matters
	if !nonBlocking(t, ln) {
		t.Error("the listener is blocking after the exec")
	}
	accepted := make(chan error)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.Close()
			accepted <- nil
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the loop is back in Accept
	closed := make(chan struct{})
	go func() { ln.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("closing the listener still waits 5 s later")
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("the accept loop ended with %v, want net.ErrClosed", err)
	}
}

// nonBlocking reports whether ln's socket has O_NONBLOCK.
func nonBlocking(tb testing.TB, ln *net.TCPListener) bool {
	tb.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var flags int
	rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil {
		tb.Fatal(err)
	}
	return flags&unix.O_NONBLOCK != 0
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

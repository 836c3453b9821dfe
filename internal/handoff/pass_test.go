// A socket sent with SendFile arrives as a working listener with its text; a message without one brings no file.

package handoff

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// unixPair is a connected pair of unix sockets, closed at the test's end.
func unixPair(tb testing.TB) (a, b *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func TestSendFileHandsOverAListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := Dup(ln.(*net.TCPListener))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, b := unixPair(t)
	if err := SendFile(a, "ok web", f); err != nil {
		t.Fatal(err)
	}
	text, got, err := ReceiveFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if text != "ok web" || got == nil {
		t.Fatalf("received %q and file %v, want \"ok web\" and a file", text, got)
	}
	ln2, err := net.FileListener(got)
	got.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	ln.Close() // only the received copy accepts now
	c, err := net.Dial("tcp", ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln2.Accept()
	if err != nil {
		t.Fatalf("the received listener does not accept: %v", err)
	}
	s.Close()
}

func TestReceiveFileOfTextAlone(t *testing.T) {
	a, b := unixPair(t)
	if err := SendFile(a, "error: no such listener", nil); err != nil {
		t.Fatal(err)
	}
	text, f, err := ReceiveFile(b)
	if err != nil || f != nil || text != "error: no such listener" {
		t.Fatalf("ReceiveFile = %q, %v, %v; want the text, no file, no error", text, f, err)
	}
	if err := SendFile(a, "", nil); err == nil {
		t.Error("SendFile of empty text succeeded")
	}
}

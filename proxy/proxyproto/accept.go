// Reading a header off an accepted socket: exactly its bytes, so that what follows is left for whichever engine reads or splices the connection next.

package proxyproto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn is an accepted connection Consume reads: a *net.TCPConn.
type Conn interface {
	io.Reader
	syscall.Conn
}

// Consume reads the v1 or v2 header c starts with and takes exactly its
// bytes off the socket, never one more: the connection may be spliced in
// the kernel next, and a byte left in a user-space buffer would be lost
// to it. It peeks (MSG_PEEK) until the header is whole, then reads it.
// ErrNoHeader: c starts otherwise, and nothing was taken. A sender that
// stops mid-header blocks it until c's read deadline, which the caller
// sets.
func Consume(c Conn) (Info, error) {
	buf := make([]byte, MaxV2)
	b, err := peek(c, buf, func(b []byte) bool {
		_, _, err := parse(b)
		return err != errShort
	})
	if err != nil {
		return Info{}, fmt.Errorf("PROXY protocol header: %w", err)
	}
	info, n, err := parse(b)
	if err != nil {
		return Info{}, err
	}
	if _, err := io.ReadFull(c, buf[:n]); err != nil {
		return Info{}, fmt.Errorf("PROXY protocol header: %w", err)
	}
	return info, nil
}

// Starts reports whether c starts with a PROXY protocol signature (v1's
// "PROXY " or v2's twelve bytes), taking nothing: it waits only for as
// many bytes as tell, one for nearly every other protocol, and until c's
// read deadline for a connection whose client sends nothing first.
func Starts(c Conn) (bool, error) {
	buf := make([]byte, len(signature))
	v1 := func(b []byte) bool { return bytes.HasPrefix(b, []byte("PROXY ")) }
	b, err := peek(c, buf, func(b []byte) bool { return !signaturePrefix(b) || v1(b) })
	if err != nil {
		return false, err
	}
	return v1(b) || bytes.Equal(b, signature), nil
}

// signaturePrefix reports whether b is the start of v1's or v2's signature.
func signaturePrefix(b []byte) bool {
	return bytes.HasPrefix(signature, b) || bytes.HasPrefix([]byte("PROXY "), b) ||
		bytes.HasPrefix(b, []byte("PROXY "))
}

// peek waits until the bytes queued on c fill buf or satisfy enough, and
// returns them, leaving them queued. io.ErrUnexpectedEOF: the peer closed
// first.
func peek(c Conn, buf []byte, enough func([]byte) bool) ([]byte, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n int
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(perr, unix.EAGAIN) || errors.Is(perr, unix.EINTR):
			return false
		case perr != nil:
			return true
		case n == 0:
			perr = io.ErrUnexpectedEOF
			return true
		}
		// Not enough yet: wait for the next segment (the poller wakes
		// the reader again when more data arrives).
		return n == len(buf) || enough(buf[:n])
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

var _ Conn = (*net.TCPConn)(nil)

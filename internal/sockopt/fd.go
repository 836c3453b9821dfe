// WithFD: code that needs a socket's descriptor (a getsockopt, TCP_REPAIR, a BPF map update) runs on it without taking it from Go's poller.

package sockopt

import "syscall"

// WithFD runs f on c's descriptor (a connection, a listener, an
// os.File), kept open for the call and left in Go's poller and
// non-blocking (os.File.Fd would make it blocking), and returns f's error
// or the one that kept f from running.
func WithFD(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

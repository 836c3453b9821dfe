// WithFD: code that needs a connection's descriptor (a getsockopt, TCP_REPAIR) runs on it without taking it from Go's poller.

package sockopt

import "net"

// WithFD runs f on c's descriptor, kept open for the call and left in
// Go's poller, and returns f's error or the one that kept f from running.
func WithFD(c *net.TCPConn, f func(fd int) error) error {
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

// Dup: a duplicate of a listening socket to hand to a new process that leaves this process's copy non-blocking.

package handoff

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dup returns a duplicate of c's socket for Start. It is not net's File:
// a File from the net package turns its descriptor blocking when exec
// passes it on (os.File.Fd), and a duplicate shares its open file
// description, blocking flag included, with the socket this process
// still accepts on. An accept loop that then finds no connection waits
// in accept(2) until one comes, out of reach of the poller: the old
// process takes connections it should leave to the new one, and closing
// the listener waits for a connection that may never come. The
// descriptor Dup returns came to os.NewFile non-blocking, so Fd leaves it
// as it is.
func Dup(c syscall.Conn) (*os.File, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	dup, dupErr := -1, error(nil)
	err = rc.Control(func(fd uintptr) {
		dup, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err = errors.Join(err, dupErr); err != nil {
		if dup >= 0 {
			unix.Close(dup)
		}
		return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return os.NewFile(uintptr(dup), "handoff"), nil
}

// Dup: a duplicate of a listening socket to hand to a new process that leaves this process's copy non-blocking.

package handoff

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
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
	var dup int
	err := sockopt.WithFD(c, func(fd int) (err error) {
		dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return os.NewFile(uintptr(dup), "handoff"), nil
}

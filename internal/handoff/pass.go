// Passing one socket to a running process over a unix connection (SCM_RIGHTS), a line of text beside it: how a master hands a worker the socket of a listener a reload adds.

package handoff

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// maxText bounds the text of one message.
const maxText = 4096

// SendFile writes text on c in one message, with f's descriptor beside
// it when f is not nil. f stays the caller's to close.
func SendFile(c *net.UnixConn, text string, f *os.File) error {
	if len(text) == 0 || len(text) > maxText {
		return fmt.Errorf("text of %d bytes: want 1 to %d", len(text), maxText)
	}
	var oob []byte
	if f != nil {
		// Not f.Fd(), which would make the socket blocking for every
		// process that shares it.
		err := sockopt.WithFD(f, func(fd int) error {
			oob = unix.UnixRights(fd)
			return nil
		})
		if err != nil {
			return err
		}
	}
	_, _, err := c.WriteMsgUnix([]byte(text), oob, nil)
	return err
}

// ReceiveFile reads one message of SendFile from c: its text, and the
// descriptor beside it as a file (close-on-exec), or nil if none came.
func ReceiveFile(c *net.UnixConn) (string, *os.File, error) {
	buf := make([]byte, maxText)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room for a few descriptors, to close any extra
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return "", nil, err
	}
	fds, err := rights(oob[:oobn])
	if err != nil {
		return "", nil, err
	}
	if flags&unix.MSG_CTRUNC != 0 || len(fds) > 1 {
		closeAll(fds)
		return "", nil, errors.New("more than one descriptor came")
	}
	if n == 0 {
		closeAll(fds)
		return "", nil, errors.New("empty message")
	}
	var f *os.File
	if len(fds) == 1 {
		unix.CloseOnExec(fds[0])
		f = os.NewFile(uintptr(fds[0]), "received")
	}
	return string(buf[:n]), f, nil
}

// rights are the descriptors of a message's control data.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

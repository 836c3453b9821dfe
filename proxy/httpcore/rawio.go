// Socket reads and writes for control mode (sendThenRead, rawRead, rawWriter) that never block and do not tell the runtime they might.

package httpcore

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Why raw system calls: syscall.Read and syscall.Write hand the goroutine's
// P to the runtime for the call's length (entersyscall), and when the call
// outlasts a sysmon tick (20 µs) sysmon gives the P to another thread. A
// write on a veth or loopback socket runs the receiver's TCP input inline
// and wakes the receiver, which often preempts the writer on the same CPU:
// the call seems to block, the P moves to a woken thread (a futex wake),
// the writer comes back without a P and parks its thread (another futex),
// and sysmon, having retaken a P, keeps polling every 20 µs. With wrk
// (-t2 -c16, 1 KiB objects) through http-reverse across veths on the 2-CPU
// bench machine, raw calls took the proxy from 0.51 to 0.22 voluntary
// context switches and from 27.5 to 23.4 µs of CPU per request (medians
// of 4 interleaved runs; HAProxy 0.31 and 20.9 in the same runs). These calls
// cannot block (MSG_DONTWAIT, whatever the descriptor's mode), so keeping
// the P through them is what the runtime would decide with hindsight;
// MSG_NOSIGNAL spares a SIGPIPE on a closed peer, which would interrupt the
// thread only for the runtime to ignore it.

// sendNow sends what the socket fd's buffer takes of b at once.
func sendNow(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// sendmsgNow sends what the socket fd's buffer takes at once of the bytes
// msg's vector points at; msg, its vector and the bytes must be memory the
// collector does not move (the heap: rawStep's).
func sendmsgNow(fd int, msg *unix.Msghdr) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(msg)),
		syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// recvNow reads what the socket fd holds into b, or fails with EAGAIN.
func recvNow(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

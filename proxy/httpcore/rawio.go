// Socket reads and writes for control mode (sendThenRead, rawRead, rawWriter) that never block and do not tell the runtime they might.

package httpcore

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
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

// idleReader reads a connection; while on, each read must bring something
// within idle (the proxy streams a chunked body or fills its cache in
// control mode: a stalled peer must not hold the pair past its bound).
// Off, the caller's own deadlines (header and request timeouts) apply.
type idleReader struct {
	dl *idleDeadline
	// conn is what Read reads when not through rc: dl's connection, or
	// a TLS connection over it.
	conn    net.Conn
	idle    time.Duration
	on      bool
	stopped *atomic.Bool
	n       int64 // bytes read: whether a response began, how much of a body came
	// pace, if not nil, bounds the reads while on by its deadline too:
	// a request body that comes too slowly (bodyPace).
	pace *bodyPace

	// noWait: a raw read that finds nothing fails with errNothingYet
	// instead of waiting.
	noWait bool
	// early: the peer may send before it has read what sendThenRead
	// writes (a client pipelining its requests), so that read looks
	// before it waits (rawStep).
	early bool
	// send and then send2, if not nil, are written by the next Read
	// before it waits (sendThenRead), counted in pair's direction Up if
	// pair is set.
	send, send2 []byte
	// full, if not nil, runs before what the socket did not take of send
	// and send2 goes the ordinary way: the peer is not reading.
	full func()
	// wait, if not nil, runs before a raw read first waits, which may
	// set the deadline the wait needs (the runtime's wait honours a
	// deadline set before it); the caller unsets it.
	wait func()
	rc   syscall.RawConn
	pair *engine.Pair
	raw  rawStep
	step func(fd uintptr) bool
}

func (r *idleReader) Read(b []byte) (int, error) {
	if r.on {
		r.refresh()
	}
	if r.send != nil || r.send2 != nil {
		return r.sendThenRead(b)
	}
	if r.rc != nil && len(b) > 0 {
		return r.rawRead(b)
	}
	n, err := r.conn.Read(b)
	r.n += int64(n)
	return n, err
}

// refresh moves the standing deadline for the next read: idle ahead, or
// the body's pace deadline where that comes first.
func (r *idleReader) refresh() {
	if r.pace == nil {
		r.dl.refresh(r.idle, r.stopped)
		return
	}
	r.dl.refreshBefore(r.idle, r.pace.deadline(r.n), r.stopped)
}

// rawRead is Read with the raw, non-blocking call (rawio.go) in place of
// the runtime's: it reads what the connection holds, else waits for more.
// A read through the runtime's system call hands the P over when it
// seems to block, and sysmon, finding such calls, keeps polling every
// 20 µs: even 3 % of exchanges going that way kept sysmon at 0.13-0.19
// sleeps per exchange. With reads and writes raw (rawWriter) and what
// more of a small body has arrived read before it is relayed (Relay), a
// 10 KiB exchange through the bench's lab went from 0.2 read, 0.14
// writev and write, 0.19 sysmon nanosleep and 0.24 futex calls to 0, 0,
// 0.01 and 0.14-0.20, and from 0.7 to 0.4-0.6 context switches (perf
// stat on the proxy under wrk -c16).
func (r *idleReader) rawRead(b []byte) (int, error) {
	st := &r.raw
	st.buf, st.waited = b, true // nothing to write: the first call reads
	if r.step == nil {
		r.step = r.rawStep // once: a method value allocates
	}
	err := r.rc.Read(r.step)
	n, rerr := st.n, st.rerr
	*st = rawStep{}
	return r.readDone(n, err, rerr)
}

// sendThenRead writes r.send and r.send2, then waits for and reads the
// answer to them.
// Read would first try a read that can only find nothing (the peer has not
// seen the request yet), then wait: a system call per request. Here the
// write runs inside the raw read, after the poller forgot any earlier
// readiness, so whatever arrives after the write wakes the wait, and the
// first read is the one after the wake. What arrived before the write
// woke nothing the wait sees: a peer that may send first (r.early, the
// client) is read once before the wait.
func (r *idleReader) sendThenRead(b []byte) (int, error) {
	st := &r.raw
	st.send, st.send2, st.buf = r.send, r.send2, b
	r.send, r.send2 = nil, nil
	if r.step == nil {
		r.step = r.rawStep // once: a method value allocates
	}
	err := r.rc.Read(r.step)
	rest, rest2, written, n, werr, rerr := st.send, st.send2, st.written, st.n, st.werr, st.rerr
	*st = rawStep{}
	r.count(written)
	if werr != nil {
		return 0, &net.OpError{Op: "write", Net: "tcp", Addr: r.dl.conn.RemoteAddr(), Err: os.NewSyscallError("write", werr)}
	}
	if len(rest)+len(rest2) > 0 {
		// The socket's buffer was full, or the wait failed before the
		// write (a shutdown's deadline ends only the wait for a request):
		// the rest goes the ordinary way.
		if r.full != nil && err == nil {
			r.full()
		}
		for _, part := range [2][]byte{rest, rest2} {
			if len(part) == 0 {
				continue
			}
			k, werr := r.dl.conn.Write(part)
			r.count(k)
			if werr != nil {
				return 0, werr
			}
		}
		if r.full != nil && err == nil {
			r.dl.reset(r.idle, r.stopped) // full's bound was for the write: the read has r's
		}
		if err == nil {
			return r.Read(b)
		}
	}
	return r.readDone(n, err, rerr)
}

// errNothingYet is a raw read's answer under noWait when nothing came.
var errNothingYet = errors.New("nothing to read yet")

// readDone is the result of a raw read: err the wait's, rerr the read's.
func (r *idleReader) readDone(n int, err, rerr error) (int, error) {
	switch {
	case err != nil:
		return 0, err
	case rerr == errNothingYet:
		return 0, rerr
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Addr: r.dl.conn.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0:
		return 0, io.EOF
	}
	r.n += int64(n)
	return n, nil
}

// count adds n bytes sent to the pair's count, unless the sender counted
// them already (pair nil).
func (r *idleReader) count(n int) {
	if r.pair != nil {
		r.pair.AddBytes(engine.Up, int64(n))
	}
}

// rawStep is sendThenRead's state, kept in the reader so that the raw
// read's callback allocates nothing and the vector sendmsg reads lies in
// memory the collector does not move.
type rawStep struct {
	// send and send2 are what is left to write, in order.
	send, send2, buf []byte
	written, n       int
	werr, rerr       error
	waited           bool
	iov              [2]unix.Iovec
	msg              unix.Msghdr
}

// sendSome writes what the socket takes at once of send and send2 (one
// sendmsg when both hold bytes) and consumes it.
func (st *rawStep) sendSome(fd int) error {
	var k int
	var err error
	if len(st.send2) == 0 {
		k, err = sendNow(fd, st.send)
	} else if len(st.send) == 0 {
		k, err = sendNow(fd, st.send2)
	} else {
		st.iov[0] = unix.Iovec{Base: unsafe.SliceData(st.send)}
		st.iov[0].SetLen(len(st.send))
		st.iov[1] = unix.Iovec{Base: unsafe.SliceData(st.send2)}
		st.iov[1].SetLen(len(st.send2))
		st.msg = unix.Msghdr{Iov: &st.iov[0]}
		st.msg.SetIovlen(2)
		k, err = sendmsgNow(fd, &st.msg)
		st.iov, st.msg = [2]unix.Iovec{}, unix.Msghdr{}
	}
	if err != nil {
		return err
	}
	st.written += k
	d := min(k, len(st.send))
	st.send, st.send2 = st.send[d:], st.send2[k-d:]
	return nil
}

// rawStep is sendThenRead's callback: first the write, then (after the
// wait) the read; true ends the raw read.
func (r *idleReader) rawStep(fd uintptr) bool {
	st := &r.raw
	if !st.waited {
		st.waited = true
		for len(st.send)+len(st.send2) > 0 {
			err := st.sendSome(int(fd))
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				if err != syscall.EAGAIN {
					st.werr = err
				}
				return true // the rest, if any, goes the ordinary way
			}
		}
		if !r.early {
			return false
		}
		// A pipelined request that came before the write is in the
		// socket, its wake spent before the poller forgot it: waiting
		// would hold it until the client sends again, or forever.
	}
	for {
		n, err := recvNow(int(fd), st.buf)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			if r.noWait && st.send == nil && st.send2 == nil {
				st.rerr = errNothingYet
				return true
			}
			if wait := r.wait; wait != nil {
				r.wait = nil
				wait()
			}
			return false
		}
		st.n, st.rerr = max(n, 0), err
		return true
	}
}

// rawWriter writes to a connection with raw, non-blocking calls
// (rawio.go), waiting in the poller while the socket's buffer is full:
// what Write does, without the runtime's system call, which hands the P
// over when it seems to block and keeps sysmon polling (see rawRead).
type rawWriter struct {
	conn net.Conn
	rc   syscall.RawConn
	st   rawStep
	fn   func(fd uintptr) bool
	// full, if not nil, runs before a write first waits for the socket's
	// buffer to take more: the peer is not reading (Conn.clientFull).
	full func()
}

// use makes w write to conn through rc, conn's RawConn; without one
// (nil), the runtime's way, as for a TLS connection.
func (w *rawWriter) use(conn net.Conn, rc syscall.RawConn) {
	*w = rawWriter{conn: conn, rc: rc, full: w.full}
}

// writev writes b1, then b2, whole unless an error stops it, and returns
// how much of them went.
func (w *rawWriter) writev(b1, b2 []byte) (int, error) {
	if w.rc == nil {
		return writeJoined(w.conn, b1, b2)
	}
	w.st.send, w.st.send2 = b1, b2
	if w.fn == nil {
		w.fn = w.step // once: a method value allocates
	}
	err := w.rc.Write(w.fn)
	n, werr := w.st.written, w.st.werr
	w.st = rawStep{}
	if err == nil && werr != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Addr: w.conn.RemoteAddr(), Err: os.NewSyscallError("write", werr)}
	}
	return n, err
}

// step sends what the socket takes; false waits until it takes more.
func (w *rawWriter) step(fd uintptr) bool {
	for len(w.st.send)+len(w.st.send2) > 0 {
		switch err := w.st.sendSome(int(fd)); err {
		case nil, syscall.EINTR:
		case syscall.EAGAIN:
			if !w.st.waited && w.full != nil {
				w.st.waited = true
				w.full()
			}
			return false
		default:
			w.st.werr = err
			return true
		}
	}
	return true
}

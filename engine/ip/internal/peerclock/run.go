// Running the peerclock program with one BPF_PROG_TEST_RUN and nothing else: no signal mask, no allocation.

package peerclock

import (
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// queryOffset is where the query sits in the frame the program reads: past
// an Ethernet header.
const queryOffset = int(peerclockPeerclockLayoutPEERCLOCK_QUERY_OFFSET)

// frameSize is the length of the frame: the header and the query.
const frameSize = queryOffset + int(unsafe.Sizeof(peerclockPeerclockQuery{}))

// testRunAttr is union bpf_attr as BPF_PROG_TEST_RUN reads it (its test
// member), for a 64-bit kernel: the pointers are __aligned_u64.
type testRunAttr struct {
	progFD      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      unsafe.Pointer
	dataOut     unsafe.Pointer
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       unsafe.Pointer
	ctxOut      unsafe.Pointer
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

// runBuf is one run's attributes and frame, the frame both the input and
// the output (the kernel copies it in before the run and out after).
type runBuf struct {
	attr  testRunAttr
	frame [frameSize]byte
}

// runBufs recycles the runs' buffers: the kernel is handed their
// addresses, which a buffer on a goroutine's stack would not keep.
var runBufs = sync.Pool{New: func() any { return new(runBuf) }}

// run runs the program once on a frame carrying q, and reads q back from
// the frame it returns. Directly rather than by ebpf.Program.Run, which
// masks SIGPROF around the run (two more system calls, against a profiler
// interrupting a long run; this one is short) and allocates the frames.
func (r *Reader) run(q *peerclockPeerclockQuery) (retval uint32, err error) {
	b := runBufs.Get().(*runBuf)
	defer runBufs.Put(b)
	query := unsafe.Slice((*byte)(unsafe.Pointer(q)), frameSize-queryOffset)
	clear(b.frame[:queryOffset])
	copy(b.frame[queryOffset:], query)
	b.attr = testRunAttr{progFD: uint32(r.objs.PeerclockRead.FD()), dataSizeIn: uint32(frameSize), dataSizeOut: uint32(frameSize),
		dataIn: unsafe.Pointer(&b.frame), dataOut: unsafe.Pointer(&b.frame)}
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&b.attr)), unsafe.Sizeof(b.attr))
		// A signal may interrupt a run before its result is copied out
		// (kernels before 5.10 check for one after each run): run again,
		// a read changes nothing.
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		break
	}
	if int(b.attr.dataSizeOut) < frameSize {
		return 0, errors.New("the program returned a shorter frame")
	}
	copy(query, b.frame[queryOffset:])
	return b.attr.retval, nil
}

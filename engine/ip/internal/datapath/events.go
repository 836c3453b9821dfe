// Events the program reports through its ring buffer: FIN, TIME_WAIT, reset, limit and watch.

package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

// EventKind says what happened to a pair.
type EventKind uint32

const (
	// EventFIN: a direction forwarded its FIN; Seq is the FIN's sequence
	// number (sender's space).
	EventFIN = EventKind(spliceSpliceEventKindSPLICE_EV_FIN)
	// EventTimeWait: both FINs were acknowledged; the pair is in TIME_WAIT.
	EventTimeWait = EventKind(spliceSpliceEventKindSPLICE_EV_TIME_WAIT)
	// EventReset: a reset was forwarded and closed the pair; Seq is its seq.
	EventReset = EventKind(spliceSpliceEventKindSPLICE_EV_RESET)
	// EventLimit: a limited direction stopped; Seq is the first sequence
	// number it did not forward (the limit itself once reached exactly).
	EventLimit = EventKind(spliceSpliceEventKindSPLICE_EV_LIMIT)
	// EventWatch: data or FIN arrived in a watched direction and was not
	// forwarded; Seq is its first sequence number.
	EventWatch = EventKind(spliceSpliceEventKindSPLICE_EV_WATCH)
)

func (k EventKind) String() string {
	switch k {
	case EventFIN:
		return "fin"
	case EventTimeWait:
		return "time_wait"
	case EventReset:
		return "reset"
	case EventLimit:
		return "limit"
	case EventWatch:
		return "watch"
	}
	return fmt.Sprintf("event(%d)", uint32(k))
}

// Event is one report from the program.
type Event struct {
	Kind EventKind
	// Pair is the pair's A tuple; Found is false if the pair was deleted
	// before the event was read (Flow still says which flow it was).
	Pair  Tuple
	Found bool
	// Dir is the direction of the packet that triggered the event.
	Dir engine.Direction
	// Flow is that packet's tuple as it arrived.
	Flow Tuple
	Seq  uint32
	// Time is when it happened, on the clock of Now.
	Time time.Duration
}

// eventSize is the size of a ring buffer record, from the generated layout.
var eventSize = int(unsafe.Sizeof(spliceSpliceEvent{}))

// decodeRecord copies a ring buffer record into its generated struct: the
// program writes it in host layout, which structs.HostLayout promises Go
// uses too. raw must hold at least sizeof(*T) bytes.
func decodeRecord[T spliceSpliceEvent](raw []byte) T {
	var v T
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), raw)
	return v
}

// eventRing reads the program's events. The ring buffer's reader never
// blocks in a system call of its own (its deadline is in the past): the
// wait for the next event is the Go runtime's poller's, on a duplicate of
// the map's descriptor, so the thread the ring buffer wakes runs the
// reading goroutine and then, on the same thread and without another
// wakeup, the Splice it hands the event to. A reader blocked in its own
// epoll_wait instead wakes a thread that must win a processor back from
// the scheduler, and its handoff to the Splice wakes a second one: two
// wakeups a loaded machine stretches to hundreds of microseconds.
type eventRing struct {
	ready *os.File // the map's descriptor, duplicated, non-blocking, in the poller
	rc    syscall.RawConn
	// mu guards r against close: the reader's AvailableBytes fails once
	// it is closed.
	mu sync.Mutex
	r  *ringbuf.Reader // nil once closed
}

// past is a deadline already gone: the reader's waits return at once.
var past = time.Unix(1, 0)

func openEventRing(m *ebpf.Map) (*eventRing, error) {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	r.SetDeadline(past)
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("duplicate the ring buffer's descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		r.Close()
		return nil, err
	}
	ready := os.NewFile(uintptr(fd), "splice_events")
	rc, err := ready.SyscallConn()
	if err != nil {
		ready.Close()
		r.Close()
		return nil, err
	}
	return &eventRing{ready: ready, rc: rc, r: r}, nil
}

// read returns the next record, waiting in the poller while the ring is
// empty.
func (er *eventRing) read() (ringbuf.Record, error) {
	for {
		rec, err := er.next()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return rec, err
		}
		err = er.rc.Read(func(uintptr) bool { return er.available() })
		if errors.Is(err, os.ErrClosed) {
			return ringbuf.Record{}, ringbuf.ErrClosed
		}
		if err != nil {
			return ringbuf.Record{}, err
		}
	}
}

// next returns the next record, or os.ErrDeadlineExceeded when there is
// none (without a system call when the ring is seen empty).
func (er *eventRing) next() (ringbuf.Record, error) {
	er.mu.Lock()
	defer er.mu.Unlock()
	switch {
	case er.r == nil:
		return ringbuf.Record{}, ringbuf.ErrClosed
	case er.r.AvailableBytes() == 0:
		return ringbuf.Record{}, os.ErrDeadlineExceeded
	}
	return er.r.Read()
}

// available reports whether a record may be waiting, or the ring was
// closed (the read then says so).
func (er *eventRing) available() bool {
	er.mu.Lock()
	defer er.mu.Unlock()
	return er.r == nil || er.r.AvailableBytes() > 0
}

func (er *eventRing) close() error {
	// The poller's descriptor first: it wakes a read waiting on it.
	err := er.ready.Close()
	er.mu.Lock()
	defer er.mu.Unlock()
	if er.r == nil {
		return err
	}
	err = errors.Join(err, er.r.Close())
	er.r = nil
	return err
}

// ReadEvent blocks until the program reports an event, the deadline set by
// SetEventDeadline passes (os.ErrDeadlineExceeded), or the datapath is
// closed (ErrClosed). Use it from one goroutine.
func (d *Datapath) ReadEvent() (Event, error) {
	rec, err := d.events.read()
	if errors.Is(err, ringbuf.ErrClosed) {
		return Event{}, ErrClosed
	}
	if err != nil {
		return Event{}, err
	}
	raw := rec.RawSample
	if len(raw) < eventSize {
		return Event{}, fmt.Errorf("engine ip: short event of %d bytes", len(raw))
	}
	hdr := decodeRecord[spliceSpliceEvent](raw)
	ev := Event{
		Kind: EventKind(hdr.Kind),
		Seq:  hdr.Seq,
		Time: time.Duration(hdr.Ktime),
		Flow: tupleFromKey(hdr.Key),
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.index.a(hdr.Key); p != nil {
		ev.Pair, ev.Found, ev.Dir = p.a(), true, engine.Up
	} else if p := d.index.b(hdr.Key); p != nil {
		ev.Pair, ev.Found, ev.Dir = p.a(), true, engine.Down
	}
	return ev, nil
}

// SetEventDeadline makes ReadEvent return os.ErrDeadlineExceeded after t;
// the zero time means no deadline.
func (d *Datapath) SetEventDeadline(t time.Time) { d.events.ready.SetReadDeadline(t) }

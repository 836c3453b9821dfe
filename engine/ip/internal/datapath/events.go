// Events the program reports through its ring buffer: FIN, TIME_WAIT, reset, limit and watch.

package datapath

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

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

// ReadEvent blocks until the program reports an event, the deadline set by
// SetEventDeadline passes (os.ErrDeadlineExceeded), or the datapath is
// closed (ErrClosed). Use it from one goroutine.
func (d *Datapath) ReadEvent() (Event, error) {
	rec, err := d.events.Read()
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
	if p := d.pairs[ev.Flow]; p != nil {
		ev.Pair, ev.Found, ev.Dir = p.spec.A, true, engine.Up
	} else if p := d.byB[ev.Flow]; p != nil {
		ev.Pair, ev.Found, ev.Dir = p.spec.A, true, engine.Down
	}
	return ev, nil
}

// SetEventDeadline makes ReadEvent return os.ErrDeadlineExceeded after t;
// the zero time means no deadline.
func (d *Datapath) SetEventDeadline(t time.Time) { d.events.SetDeadline(t) }

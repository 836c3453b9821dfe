// Sequence tests: teardown to TIME_WAIT, resets, hold then update, watch and limit events, the sweeper and the per-direction counters.

package datapath

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// send runs a segment through the program and fails the test unless the
// verdict is want.
func (h *harness) send(s packet.Seg, want int32) []byte {
	h.tb.Helper()
	v, out := h.run(s.Bytes())
	if v != want {
		h.tb.Fatalf("verdict %d for seq %d ack %d flags %#x, want %d", v, s.Seq, s.Ack, s.Flags, want)
	}
	return out
}

func (h *harness) stats(a Tuple) PairStats {
	h.tb.Helper()
	st, err := h.dp.Lookup(a)
	if err != nil {
		h.tb.Fatalf("Lookup: %v", err)
	}
	return st
}

// events reads the events already reported; the program has returned, so
// they are in the ring buffer and a short deadline only ends the read.
func (h *harness) events() []Event {
	h.tb.Helper()
	var out []Event
	for {
		h.dp.SetEventDeadline(time.Now().Add(20 * time.Millisecond))
		ev, err := h.dp.ReadEvent()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			h.tb.Fatalf("ReadEvent: %v", err)
		}
		out = append(out, ev)
	}
}

func kinds(evs []Event) []EventKind {
	var out []EventKind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

// TestTeardownToTimeWait walks SpliceNP 2.2: FIN from the client, its ACK,
// FIN from the server, the last ACK; the pair keeps translating
// retransmitted FINs in TIME_WAIT until the sweeper removes it after 2MSL.
func TestTeardownToTimeWait(t *testing.T) {
	h := newHarness(t, Options{TimeWait: 30 * time.Second})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)
	a := spec.A

	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN, Payload: payload}), verdictRedirect)
	if got := h.stats(a).Phase; got != PhaseFINRelayed1 {
		t.Fatalf("after client FIN: %v", got)
	}
	clientFINEnd := uint32(upNxt + len(payload) + 1)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK}), verdictRedirect)
	if got := h.stats(a).Phase; got != PhaseACKRelayed1 {
		t.Fatalf("after its ACK: %v", got)
	}
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	if got := h.stats(a).Phase; got != PhaseFINRelayed2 {
		t.Fatalf("after server FIN: %v", got)
	}
	h.send(tp.up(packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK}), verdictRedirect)
	st := h.stats(a)
	if st.Phase != PhaseTimeWait {
		t.Fatalf("after the last ACK: %v", st.Phase)
	}
	if !st.Up.FIN || !st.Up.FINAcked || !st.Down.FIN || !st.Down.FINAcked {
		t.Errorf("flags %+v %+v", st.Up, st.Down)
	}
	evs := h.events()
	if want := []EventKind{EventFIN, EventFIN, EventTimeWait}; !slices.Equal(kinds(evs), want) {
		t.Fatalf("events %v, want %v", kinds(evs), want)
	}
	if evs[0].Dir != engine.Up || evs[0].Seq != clientFINEnd-1 || evs[1].Dir != engine.Down || !evs[2].Found || evs[2].Pair != a {
		t.Errorf("events %+v", evs)
	}

	// The server did not get the last ACK and retransmits its FIN.
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)

	now := Now()
	if rm, err := h.dp.Sweep(now); err != nil || len(rm) != 0 {
		t.Fatalf("Sweep before 2MSL removed %v (%v)", rm, err)
	}
	// Past 2MSL by one unit of the stamps (2^timeShift ns): ages are
	// counted in whole units, so 30 s on the dot may read as a unit less.
	rm, err := h.dp.Sweep(now + 30*time.Second + 1<<timeShift)
	if err != nil || len(rm) != 1 || rm[0].Pair != a || rm[0].Reason != "time_wait" {
		t.Fatalf("Sweep after 2MSL: %v (%v)", rm, err)
	}
	// Gone: the next packet of the tuple belongs to the stack again.
	h.send(tp.up(packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK}), verdictPass)
}

// TestSYNReopensEndedPair: a client whose ports wrap sends a SYN on the
// tuple of a pair waiting out TIME_WAIT; like a TIME_WAIT socket, the
// program hands it to the stack (the listener) and takes the flow out, so
// the rest of the handshake reaches the stack too; the server's direction
// still translates. The sweep then removes the pair without complaint.
func TestSYNReopensEndedPair(t *testing.T) {
	h := newHarness(t, Options{TimeWait: 30 * time.Second})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)
	a := spec.A
	clientFINEnd := uint32(upNxt + 1)
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	h.send(tp.up(packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK}), verdictRedirect)
	if st := h.stats(a); st.Phase != PhaseTimeWait {
		t.Fatalf("phase %v, want time_wait", st.Phase)
	}
	// A SYN-ACK is no new connection: still dropped.
	h.send(tp.up(packet.Seg{Seq: 7, Ack: 9, Flags: packet.SYN | packet.ACK}), verdictDrop)
	h.send(tp.up(packet.Seg{Seq: clientFINEnd + 1000, Flags: packet.SYN}), verdictPass)
	if c, err := h.dp.Counters(); err != nil || c["reopened"] != 1 {
		t.Errorf("reopened counter %d (%v), want 1", c["reopened"], err)
	}
	// The handshake's ACK belongs to the stack as well.
	h.send(tp.up(packet.Seg{Seq: clientFINEnd + 1001, Ack: 1, Flags: packet.ACK}), verdictPass)
	// The server's retransmitted FIN is still translated.
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	rm, err := h.dp.Sweep(Now() + 30*time.Second + 1<<timeShift) // one unit past 2MSL, as above
	if err != nil || len(rm) != 1 || rm[0].Pair != a {
		t.Fatalf("Sweep after 2MSL: %v (%v)", rm, err)
	}
}

// TestSimultaneousClose: both FINs cross, each acknowledged by the other's
// FIN segment, then the final ACKs.
func TestSimultaneousClose(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo6
	spec := h.baseSpec(tp)
	h.insert(spec)

	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)
	if got := h.stats(spec.A).Phase; got != PhaseFINRelayed2 {
		t.Fatalf("after both FINs: %v", got)
	}
	h.send(tp.up(packet.Seg{Seq: upNxt + 1, Ack: upAcked + 1, Flags: packet.ACK}), verdictRedirect)
	h.send(tp.down(packet.Seg{Seq: downNxt + 1, Ack: upNxt + upOff + 1, Flags: packet.ACK}), verdictRedirect)
	if got := h.stats(spec.A).Phase; got != PhaseTimeWait {
		t.Fatalf("after both ACKs: %v", got)
	}
}

// TestResetClosesPair: a reset at the receiver's expected sequence number
// is forwarded, closes the pair, and later segments are dropped until the
// sweeper removes it.
func TestResetClosesPair(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)

	out := h.send(tp.down(packet.Seg{Seq: downNxt, Flags: packet.RST}), verdictRedirect)
	want := tp.downOut(packet.Seg{Seq: downNxt + downOff, Flags: packet.RST}).Bytes()
	if string(out) != string(want) {
		t.Errorf("RST translated to %x, want %x", out, want)
	}
	if got := h.stats(spec.A).Phase; got != PhaseClosed {
		t.Fatalf("phase %v after RST", got)
	}
	evs := h.events()
	if len(evs) != 1 || evs[0].Kind != EventReset || evs[0].Dir != engine.Down {
		t.Fatalf("events %+v", evs)
	}
	before := h.drops()
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Payload: payload}), verdictDrop)
	if got := dropDelta(before, h.drops()); got != "closed" {
		t.Errorf("late segment dropped as %q", got)
	}
	rm, err := h.dp.Sweep(Now())
	if err != nil || len(rm) != 1 || rm[0].Reason != "reset" {
		t.Fatalf("Sweep: %v (%v)", rm, err)
	}
}

// TestHoldThenUpdate: a pair inserted in hold drops everything but learns
// the senders' clocks; Update publishes the offsets and forwarding starts.
func TestHoldThenUpdate(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo4
	final := h.baseSpec(tp)
	held := final
	held.Up = DirSpec{SndNxt: upNxt, DirMode: DirMode{Mode: engine.Hold}}
	held.Down = DirSpec{SndNxt: downNxt, DirMode: DirMode{Mode: engine.Hold}}
	h.insert(held)

	before := h.drops()
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: 1, Flags: packet.ACK, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(12345, 1)), Payload: payload}), verdictDrop)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: 1, Flags: packet.ACK, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(777, 1))}), verdictDrop)
	h.send(tp.down(packet.Seg{Seq: downNxt + 1<<30, Ack: 1, Flags: packet.ACK, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(999999, 1))}), verdictDrop)
	if got := h.drops()["hold"] - before["hold"]; got != 3 {
		t.Errorf("%d hold drops, want 3", got)
	}
	st := h.stats(final.A)
	if st.Up.TSLast != 12345 || st.Down.TSLast != 777 {
		t.Errorf("clocks learnt in hold: up %d down %d, want 12345 and 777 (an out-of-window segment must not count)", st.Up.TSLast, st.Down.TSLast)
	}

	if err := h.dp.Update(final); err != nil {
		t.Fatalf("Update: %v", err)
	}
	out := h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 7, Payload: payload}), verdictRedirect)
	if want := tp.upOut(packet.Seg{Seq: upNxt + upOff, Ack: downNxt, Flags: packet.ACK, Win: 7, Payload: payload}).Bytes(); string(out) != string(want) {
		t.Errorf("after Update: %x, want %x", out, want)
	}
	if err := h.dp.Update(final); err == nil {
		t.Error("Update of a pair no longer in hold succeeded")
	}
}

// TestWatch: data in a watched direction is reported once and kept, not
// forwarded; acks still flow; forwarding resumes after SetMode.
func TestWatch(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo4
	spec := h.baseSpec(tp)
	spec.Up.Mode = engine.Watch
	h.insert(spec)

	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked - 7, Flags: packet.ACK}), verdictRedirect)
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked - 5, Flags: packet.ACK | packet.PSH, Payload: payload}), verdictKept)
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 77, Payload: payload}), verdictKept)
	h.send(tp.up(packet.Seg{Seq: upNxt + uint32(len(payload)), Ack: upAcked, Flags: packet.ACK | packet.FIN}), verdictKept)
	// A retransmission of bytes already forwarded passes the watch.
	h.send(tp.up(packet.Seg{Seq: upNxt - uint32(len(payload)), Ack: upAcked, Flags: packet.ACK | packet.PSH, Payload: payload}), verdictRedirect)
	evs := h.events()
	if len(evs) != 1 || evs[0].Kind != EventWatch || evs[0].Seq != upNxt || evs[0].Dir != engine.Up {
		t.Fatalf("events %+v, want one watch at %d", evs, upNxt)
	}
	st := h.stats(spec.A).Up
	if !st.Watched || st.Kept != 3 {
		t.Errorf("Watched %v, Kept %d; want true and 3", st.Watched, st.Kept)
	}
	// A kept segment's ack and window are its sender's: tracked.
	if st.AckHi != upAcked || st.Window != 0 {
		t.Errorf("AckHi %d window %d after the kept segments, want %d and 0", st.AckHi, st.Window, upAcked)
	}
	k, err := h.dp.AwaitKept(spec.A, engine.Up, 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Segs) != 3 || string(k.Segs[0].Data) != string(payload) || k.Segs[0].Seq != upNxt || k.Segs[0].Ack() != upAcked-5 ||
		k.Segs[1].Window() != 77 || !k.Segs[2].FIN() || k.Segs[2].End() != upNxt+uint32(len(payload))+1 {
		t.Fatalf("kept %+v", k)
	}
	// The sender's next bare ACK has its seq past the dropped data: it is
	// forwarded, and SndNxt stays at the first byte not forwarded.
	h.send(tp.up(packet.Seg{Seq: upNxt + uint32(len(payload)), Ack: upAcked, Flags: packet.ACK}), verdictRedirect)
	if st := h.stats(spec.A).Up; st.SndNxt != upNxt {
		t.Errorf("SndNxt %d after a bare ACK past the watched data, want %d", st.SndNxt, upNxt)
	}
	if err := h.dp.SetMode(spec.A, engine.Up, DirMode{Mode: engine.Forward}); err != nil {
		t.Fatal(err)
	}
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.PSH, Payload: payload}), verdictRedirect)
}

// TestLimit: a limited direction forwards up to the limit exactly, stops
// at a segment that would cross it, and reports where it stopped.
func TestLimit(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo6
	spec := h.baseSpec(tp)
	spec.Down.Limited, spec.Down.LimitSeq = true, downNxt+100
	h.insert(spec)
	data := make([]byte, 60)

	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Payload: data}), verdictRedirect)
	before := h.drops()
	h.send(tp.down(packet.Seg{Seq: downNxt + 60, Ack: upNxt + upOff, Flags: packet.ACK, Payload: data}), verdictKept)
	if got := dropDelta(before, h.drops()); got != "" {
		t.Errorf("crossing segment dropped as %q", got)
	}
	h.send(tp.down(packet.Seg{Seq: downNxt + 60, Ack: upNxt + upOff, Flags: packet.ACK}), verdictRedirect)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Payload: data}), verdictRedirect) // retransmission below the limit
	evs := h.events()
	if len(evs) != 1 || evs[0].Kind != EventLimit || evs[0].Seq != downNxt+60 {
		t.Fatalf("events %+v, want one limit at %d", evs, downNxt+60)
	}
	if k, err := h.dp.AwaitKept(spec.A, engine.Down, 1, time.Second); err != nil || len(k.Segs) != 1 || k.Segs[0].Seq != downNxt+60 || len(k.Segs[0].Data) != len(data) {
		t.Fatalf("kept %+v (%v), want the crossing segment's %d bytes at %d", k, err, len(data), downNxt+60)
	}
	h.dp.ForgetKept(spec.A, engine.Down)

	// The control plane takes the 40 bytes to the limit itself and sets a
	// new limit; a segment ending exactly on it is forwarded and reported.
	if err := h.dp.SetMode(spec.A, engine.Down, DirMode{Mode: engine.Forward, Limited: true, LimitSeq: downNxt + 120}); err != nil {
		t.Fatal(err)
	}
	h.send(tp.down(packet.Seg{Seq: downNxt + 60, Ack: upNxt + upOff, Flags: packet.ACK, Payload: data}), verdictRedirect)
	evs = h.events()
	if len(evs) != 1 || evs[0].Kind != EventLimit || evs[0].Seq != downNxt+120 {
		t.Fatalf("events %+v, want one limit at %d", evs, downNxt+120)
	}
	if st := h.stats(spec.A).Down; !st.LimitReached || st.SndNxt != downNxt+120 {
		t.Errorf("down stats %+v", st)
	}
}

// TestKeep: a pair inserted with Keep keeps every segment, in records
// of kept_chunk bytes, through Update with Keep, until StopKeeping
// succeeds with the count; a released direction hands them to the stack.
func TestKeep(t *testing.T) {
	h := newHarness(t, Options{keptChunk: 16})
	tp := topo4
	final := h.baseSpec(tp)
	held := final
	held.Up = DirSpec{SndNxt: upNxt, DirMode: DirMode{Mode: engine.Hold}}
	held.Down = DirSpec{SndNxt: downNxt, DirMode: DirMode{Mode: engine.Hold}}
	held.Keep = true
	h.insert(held)

	before := h.drops()
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: 1, Flags: packet.ACK, Payload: payload}), verdictKept)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: 1, Flags: packet.ACK}), verdictKept)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: 2, Flags: packet.RST}), verdictKept)
	h.send(tp.down(packet.Seg{Seq: downNxt, Flags: packet.SYN}), verdictDrop)
	if got := dropDelta(before, h.drops()); got != "syn_on_spliced" {
		t.Errorf("drops while keeping: %q, want only the SYN's", got)
	}
	final.Keep = true
	if err := h.dp.Update(final); err != nil {
		t.Fatalf("Update: %v", err)
	}
	h.send(tp.up(packet.Seg{Seq: upNxt + uint32(len(payload)), Ack: upAcked, Flags: packet.ACK | packet.FIN}), verdictKept)
	up, err := h.dp.AwaitKept(final.A, engine.Up, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The payload in records of 16 bytes, then the FIN on its own.
	if len(up.Segs) != 4 || up.Segs[0].Seq != upNxt || up.Segs[1].Seq != upNxt+16 || len(up.Segs[2].Data) != len(payload)-32 || !up.Segs[2].Last || up.Segs[0].Last ||
		!up.Segs[3].FIN() || string(append(append(up.Segs[0].Data, up.Segs[1].Data...), up.Segs[2].Data...)) != string(payload) {
		t.Fatalf("kept up %+v", up)
	}
	if n, ok, err := h.dp.StopKeeping(final.A, engine.Up, 1); ok || err != nil || n != 2 {
		t.Fatalf("StopKeeping with a stale count: %d %v %v, want 2 false", n, ok, err)
	}
	if n, ok, err := h.dp.StopKeeping(final.A, engine.Up, 2); !ok || err != nil || n != 2 {
		t.Fatalf("StopKeeping: %d %v %v, want 2 true", n, ok, err)
	}
	// The client's window (9 << 7 bytes) takes the server's data below.
	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Win: 9, Payload: payload}), verdictRedirect)
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload}), verdictKept) // still keeping
	if _, ok, err := h.dp.Release(final.A, engine.Down, 3); !ok || err != nil {
		t.Fatalf("Release: %v %v", ok, err)
	}
	// Released: forwarding goes on, and data that a watch would keep goes
	// to the stack.
	h.send(tp.down(packet.Seg{Seq: downNxt, Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload}), verdictRedirect)
	if err := h.dp.SetMode(final.A, engine.Down, DirMode{Mode: engine.Watch}); err != nil {
		t.Fatal(err)
	}
	h.send(tp.down(packet.Seg{Seq: downNxt + uint32(len(payload)), Ack: upNxt + upOff, Flags: packet.ACK, Payload: payload}), verdictPass)
	if st := h.stats(final.A); !st.Down.Released || st.Down.Keeping || st.Up.Keeping || st.Down.Kept != 3 {
		t.Errorf("stats %+v", st)
	}
	c, err := h.dp.Counters()
	if err != nil || c["kept"] != 5 || c["passed"] != 1 {
		t.Errorf("counters %v (%v), want 5 kept and 1 passed", c, err)
	}
}

// TestCounters: bytes count stream bytes once, packets every packet;
// acks, windows and clocks are tracked per direction.
func TestCounters(t *testing.T) {
	h := newHarness(t, Options{})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)
	data := make([]byte, 1000)

	h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked - 5, Flags: packet.ACK, Win: 11, Payload: data}), verdictRedirect)
	h.send(tp.up(packet.Seg{Seq: upNxt + 1000, Ack: upAcked, Flags: packet.ACK, Win: 12, Payload: data}), verdictRedirect)
	h.send(tp.up(packet.Seg{Seq: upNxt + 500, Ack: upAcked - 5, Flags: packet.ACK, Win: 13, Payload: data, Opts: packet.Cat(packet.OptNOP(), packet.OptNOP(), packet.OptTS(4242, 0))}), verdictRedirect)
	st := h.stats(spec.A)
	up := st.Up
	if up.Bytes != 2000 || up.Packets != 3 || up.SndNxt != upNxt+2000 || up.AckHi != upAcked || up.Window != 13 || up.TSLast != 4242 {
		t.Errorf("up %+v", up)
	}
	if st.Down.Packets != 0 || st.Down.Bytes != 0 {
		t.Errorf("down %+v", st.Down)
	}
	if age := Now() - up.LastSeen; age < 0 || age > time.Minute {
		t.Errorf("LastSeen %v ago", age)
	}
	c, err := h.dp.Counters()
	if err != nil || c["forwarded"] != 3 {
		t.Errorf("counters %v (%v)", c, err)
	}
}

// TestSweepIdle: with an idle timeout, a pair that forwarded nothing for
// that long is removed; a recent one is kept.
func TestSweepIdle(t *testing.T) {
	h := newHarness(t, Options{IdleTimeout: time.Minute})
	spec := h.baseSpec(topo4)
	h.insert(spec)
	now := Now()
	if rm, _ := h.dp.Sweep(now); len(rm) != 0 {
		t.Fatalf("fresh pair swept: %v", rm)
	}
	rm, err := h.dp.Sweep(now + time.Minute + time.Second)
	if err != nil || len(rm) != 1 || rm[0].Reason != "idle" {
		t.Fatalf("Sweep: %v (%v)", rm, err)
	}
	if _, err := h.dp.Lookup(spec.A); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after sweep: %v", err)
	}
}

// TestInsertErrors: the table refuses what it cannot translate or hold.
func TestInsertErrors(t *testing.T) {
	h := newHarness(t, Options{MaxPairs: 2})
	base := h.baseSpec(topo4)
	h.insert(base)

	dup := h.baseSpec(topo4.withPort(40001))
	dup.B = base.B
	mixed := h.baseSpec(topo4)
	mixed.B = topo6.b()
	shift := h.baseSpec(topo4.withPort(40002))
	shift.Up.InShift = 15
	for name, spec := range map[string]PairSpec{"duplicate B": dup, "mixed families": mixed, "shift 15": shift, "same A": base} {
		if err := h.dp.Insert(spec); err == nil {
			t.Errorf("%s: Insert succeeded", name)
		}
	}
	h.insert(h.baseSpec(topo4.withPort(40003)))
	if err := h.dp.Insert(h.baseSpec(topo4.withPort(40004))); !errors.Is(err, ErrFull) {
		t.Errorf("third pair with MaxPairs 2: %v", err)
	}
	if err := h.dp.Delete(topo4.withPort(40005).a()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of an unknown pair: %v", err)
	}
	// A freed pair number stays in quarantine: the table is still full.
	if err := h.dp.Delete(base.A); err != nil {
		t.Fatal(err)
	}
	if err := h.dp.Insert(h.baseSpec(topo4.withPort(40004))); !errors.Is(err, ErrFull) {
		t.Errorf("insert into a quarantined slot: %v", err)
	}
}

// TestEndedPairGivesWay: RemoveEnded takes out a pair by its B tuple
// only once it ended and the caller's test, run with its spec and state,
// agrees; then none of its flows translates, OnTable reports it gone,
// and a second call finds nothing. Insert takes the tuples of an ended
// pair over (a client that reused its port: its SYN went to the stack),
// and still refuses those of a live one.
func TestEndedPairGivesWay(t *testing.T) {
	var left []Tuple
	h := newHarness(t, Options{TimeWait: 30 * time.Second, OnTable: func(b Tuple, in bool) {
		if !in {
			left = append(left, b)
		}
	}})
	tp := topo4
	spec := h.baseSpec(tp)
	h.insert(spec)
	asked := 0
	agree := func(PairSpec, PairStats) bool { asked++; return true }
	if ok, err := h.dp.RemoveEnded(spec.B, agree); ok || err != nil || asked != 0 {
		t.Fatalf("a live pair: removed %v (%v), test run %d times", ok, err, asked)
	}
	toTimeWait := func() {
		t.Helper()
		clientFINEnd := uint32(upNxt + 1)
		h.send(tp.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN}), verdictRedirect)
		h.send(tp.down(packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN}), verdictRedirect)
		h.send(tp.up(packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK}), verdictRedirect)
		if st := h.stats(spec.A); st.Phase != PhaseTimeWait {
			t.Fatalf("phase %v, want time_wait", st.Phase)
		}
	}
	toTimeWait()
	var seen PairStats
	ok, err := h.dp.RemoveEnded(spec.B, func(s PairSpec, st PairStats) bool { seen = st; return false })
	if ok || err != nil || seen.Phase != PhaseTimeWait || seen.Up.TSLast == 0 {
		t.Fatalf("refused by the test: removed %v (%v), state %+v", ok, err, seen)
	}
	if _, err := h.dp.Lookup(spec.A); err != nil {
		t.Fatalf("a pair the test refused is gone: %v", err)
	}
	if ok, err := h.dp.RemoveEnded(spec.B, agree); !ok || err != nil {
		t.Fatalf("an ended pair the test agrees to: removed %v (%v)", ok, err)
	}
	if _, err := h.dp.Lookup(spec.A); !errors.Is(err, ErrNotFound) {
		t.Errorf("after RemoveEnded Lookup: %v", err)
	}
	if len(left) != 1 || left[0] != spec.B {
		t.Errorf("OnTable reported %v leaving, want %v", left, spec.B)
	}
	h.send(tp.down(packet.Seg{Seq: 1, Flags: packet.SYN | packet.ACK, Ack: 77}), verdictPass)
	if ok, err := h.dp.RemoveEnded(spec.B, agree); ok || !errors.Is(err, ErrNotFound) {
		t.Errorf("a second RemoveEnded: %v (%v)", ok, err)
	}

	h.insert(spec)
	toTimeWait()
	h.send(tp.up(packet.Seg{Seq: upNxt + 1000, Flags: packet.SYN}), verdictPass) // reopened
	if err := h.dp.Insert(spec); err != nil {
		t.Fatalf("Insert on an ended pair's tuples: %v", err)
	}
	if st := h.stats(spec.A); st.Phase != PhaseSpliced {
		t.Errorf("the new pair is in phase %v", st.Phase)
	}
	if err := h.dp.Insert(spec); err == nil {
		t.Error("Insert on a live pair's tuples succeeded")
	}
}

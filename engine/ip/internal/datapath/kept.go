// Kept segments: the program's ring of segments it kept instead of dropping them while a pair changes hands, gathered per pair and direction, and the compare-and-swaps that stop or release the keeping exactly when every kept segment has arrived.

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/splicer/splicer/engine"
)

// KeptSeg is one record of a segment the program kept: the whole segment,
// or one piece of a long (GSO) one.
type KeptSeg struct {
	// Seq is the sequence number (sender's space) of Data[0].
	Seq  uint32
	Data []byte
	// Header is the segment's TCP header as it arrived; its seq is the
	// segment's first byte, which precedes Seq in the later pieces of a
	// long segment.
	Header []byte
	// Last: the segment's last record; its FIN, if any, follows Data.
	Last bool
	// At is when the program kept it, on the clock of Now.
	At time.Duration
}

// Flags are the segment's TCP flags.
func (k KeptSeg) Flags() uint8 { return k.Header[13] }

// Ack is the segment's acknowledgment number, valid with the ACK flag.
func (k KeptSeg) Ack() uint32 { return binary.BigEndian.Uint32(k.Header[8:]) }

// HasAck reports the ACK flag.
func (k KeptSeg) HasAck() bool { return k.Flags()&uint8(spliceSpliceTcpFlagTCP_ACK) != 0 }

// RST reports the RST flag.
func (k KeptSeg) RST() bool { return k.Flags()&uint8(spliceSpliceTcpFlagTCP_RST) != 0 }

// FIN reports a FIN right after Data: the FIN flag on the last record.
func (k KeptSeg) FIN() bool { return k.Last && k.Flags()&uint8(spliceSpliceTcpFlagTCP_FIN) != 0 }

// Window is the segment's raw (unscaled) window.
func (k KeptSeg) Window() uint16 { return binary.BigEndian.Uint16(k.Header[14:]) }

// TSVal returns the segment's TSval and TSecr, if it has the option.
func (k KeptSeg) TSVal() (tsval, tsecr uint32, ok bool) {
	h := k.Header
	for i := 20; i < len(h); {
		switch h[i] {
		case 0:
			return 0, 0, false
		case 1:
			i++
			continue
		}
		if i+1 >= len(h) || h[i+1] < 2 || i+int(h[i+1]) > len(h) {
			return 0, 0, false
		}
		if h[i] == 8 && h[i+1] == 10 {
			return binary.BigEndian.Uint32(h[i+2:]), binary.BigEndian.Uint32(h[i+6:]), true
		}
		i += int(h[i+1])
	}
	return 0, 0, false
}

// End is the sequence number after the record: its bytes and its FIN.
func (k KeptSeg) End() uint32 {
	e := k.Seq + uint32(len(k.Data))
	if k.FIN() {
		e++
	}
	return e
}

// keptMask is the count of kept segments in a direction's flags.
const (
	flagKeptOne  = uint32(spliceSpliceFlagSPLICE_F_KEPT_ONE)
	flagKeptMask = uint32(spliceSpliceFlagSPLICE_F_KEPT_MASK)
	flagPass     = uint32(spliceSpliceFlagSPLICE_F_PASS)
	flagKeep     = uint32(spliceSpliceFlagSPLICE_F_KEEP)
	keptModulo   = flagKeptMask/flagKeptOne + 1
)

// keptCount is the count of kept segments that flags hold.
func keptCount(flags uint32) uint32 { return (flags & flagKeptMask) / flagKeptOne }

// maxKeptBytes bounds what the store holds for one direction of one
// pair; past it, records are counted but their bytes dropped (a gap the
// sender's retransmission fills).
const maxKeptBytes = 64 << 20

// keptStore gathers the kept ring's records by pair and direction.
type keptStore struct {
	rd *ringbuf.Reader

	mu    sync.Mutex
	flows map[Tuple]keptRef   // the flow a record travelled -> its pair and direction
	pairs map[Tuple]*keptPair // by A tuple
	done  chan struct{}       // closed when run returns
	lost  atomic.Int64        // records for no pair (removed before they were read)
	bad   atomic.Int64        // malformed records
}

type keptRef struct {
	a   Tuple
	dir engine.Direction
}

type keptPair struct {
	dirs    [2]keptDir
	changed chan struct{} // one pending notice of new records
	// since is when the pair was inserted: records kept earlier are an
	// earlier pair's of the same tuples, read late.
	since time.Duration
}

type keptDir struct {
	segs  []KeptSeg
	bytes int
	// done counts the segments whose last record arrived, modulo the
	// program's count.
	done uint32
	// overflow: bytes were dropped past maxKeptBytes.
	overflow bool
}

var keptHeaderSize = int(unsafe.Offsetof(spliceSpliceKept{}.Data))

func newKeptStore(rd *ringbuf.Reader) *keptStore {
	return &keptStore{rd: rd, flows: make(map[Tuple]keptRef), pairs: make(map[Tuple]*keptPair), done: make(chan struct{})}
}

// run reads the ring until it is closed.
func (s *keptStore) run() {
	defer close(s.done)
	var rec ringbuf.Record
	for {
		if err := s.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			continue
		}
		s.add(rec.RawSample)
	}
}

func (s *keptStore) close() error {
	err := s.rd.Close()
	<-s.done
	return err
}

// add files one raw record under its pair and direction.
func (s *keptStore) add(raw []byte) {
	if len(raw) < keptHeaderSize {
		s.bad.Add(1)
		return
	}
	var hdr spliceSpliceKept
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), keptHeaderSize), raw)
	n, hl := int(hdr.Len), int(hdr.Hlen)
	if n > len(raw)-keptHeaderSize || hl < 20 || hl > len(hdr.Hdr) {
		s.bad.Add(1)
		return
	}
	flow := tupleFromKey(hdr.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.flows[flow]
	p := s.pairs[ref.a]
	if !ok || p == nil || time.Duration(hdr.Ktime) < p.since {
		s.lost.Add(1)
		return
	}
	d := &p.dirs[ref.dir]
	k := KeptSeg{Seq: hdr.Seq, Header: append([]byte(nil), hdr.Hdr[:hl]...), Last: hdr.Last != 0, At: time.Duration(hdr.Ktime)}
	if d.bytes+n <= maxKeptBytes {
		k.Data = append([]byte(nil), raw[keptHeaderSize:keptHeaderSize+n]...)
		d.bytes += n
		d.segs = append(d.segs, k)
	} else {
		d.overflow = true
	}
	if k.Last {
		d.done = (d.done + 1) % keptModulo
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// register starts gathering the records of a pair's two flows.
func (s *keptStore) register(p *pair) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, b := p.a(), p.b()
	s.flows[a] = keptRef{a, engine.Up}
	s.flows[b] = keptRef{a, engine.Down}
	s.pairs[a] = &keptPair{changed: make(chan struct{}, 1), since: Now()}
}

// unregister forgets a pair and its records.
func (s *keptStore) unregister(p *pair) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := p.a()
	delete(s.flows, a)
	delete(s.flows, p.b())
	delete(s.pairs, a)
}

// StopGathering forgets pair a's kept records for good, and those still
// to come (counted as lost): the caller will never ask again (a pair
// that forwards both ways until it closes). Its bookkeeping would
// otherwise stay for the pair's life.
func (d *Datapath) StopGathering(a Tuple) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.pairOf(a); p != nil {
		d.kept.unregister(p)
	}
}

// KeptState is what the store holds of one direction of a pair.
type KeptState struct {
	// Segs are the records received, in the order the ring delivered them
	// (each CPU's in the order it kept them).
	Segs []KeptSeg
	// Done counts the segments whose last record arrived (modulo 2^22,
	// as the program counts them).
	Done uint32
	// Overflow: past 64 MiB, records were counted but their bytes dropped.
	Overflow bool
}

// Kept returns what the program kept of direction dir of pair a so far.
// The slices stay valid; later records are appended after them.
func (d *Datapath) Kept(a Tuple, dir engine.Direction) (KeptState, error) {
	s := d.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pairs[a.unmapped()]
	if p == nil {
		return KeptState{}, fmt.Errorf("%w: %v", ErrNotFound, a)
	}
	k := &p.dirs[dir]
	return KeptState{Segs: k.segs[:len(k.segs):len(k.segs)], Done: k.done, Overflow: k.overflow}, nil
}

// ForgetKept drops the records of direction dir of pair a received so
// far (the caller has used them); the count goes on.
func (d *Datapath) ForgetKept(a Tuple, dir engine.Direction) {
	s := d.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pairs[a.unmapped()]; p != nil {
		p.dirs[dir].segs, p.dirs[dir].bytes = nil, 0
	}
}

// KeptChanged returns a channel that receives (once per batch) when new
// records of pair a arrive.
func (d *Datapath) KeptChanged(a Tuple) (<-chan struct{}, error) {
	s := d.kept
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pairs[a.unmapped()]
	if p == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, a)
	}
	return p.changed, nil
}

// AwaitKept waits until n segments (the program's count, as StopKeeping
// or Release returned it) of direction dir of pair a have arrived whole,
// or until timeout, and returns what has arrived. A segment the program
// counted is in the ring within microseconds (it is written right after
// it is counted, or taken out of the count again when the ring is full).
func (d *Datapath) AwaitKept(a Tuple, dir engine.Direction, n uint32, timeout time.Duration) (KeptState, error) {
	ch, err := d.KeptChanged(a)
	if err != nil {
		return KeptState{}, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		k, err := d.Kept(a, dir)
		if err != nil || k.Done == n%keptModulo {
			return k, err
		}
		select {
		case <-ch:
		case <-deadline.C:
			return k, fmt.Errorf("engine ip: %v %v: %d of %d kept segments arrived within %v", a, dir, k.Done, n, timeout)
		}
	}
}

// StopKeeping ends the keeping Insert (or Update) started with
// PairSpec.Keep, in one compare-and-swap with the direction's count of
// kept segments: if the count is n (any count if n < 0) the program
// forwards from now on, and StopKeeping returns the count and true; else
// it returns the count and false (more segments were kept since the
// caller looked), and nothing changes.
func (d *Datapath) StopKeeping(a Tuple, dir engine.Direction, n int64) (uint32, bool, error) {
	return d.casKept(a, dir, n, 0, flagKeep)
}

// Release hands the direction's segments that would be kept to the stack
// from now on (the forwarder's own socket, rebuilt or thawed), in one
// compare-and-swap with its count of kept segments, as StopKeeping: only
// if the count is n (any if n < 0), so a caller that has put every kept
// segment in the socket knows the next one reaches the socket after
// them. It also ends any keeping.
func (d *Datapath) Release(a Tuple, dir engine.Direction, n int64) (uint32, bool, error) {
	return d.casKept(a, dir, n, flagPass, flagKeep)
}

func (d *Datapath) casKept(a Tuple, dir engine.Direction, n int64, set, clear uint32) (uint32, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return 0, false, err
	}
	f := &d.entry(p.slot(dir)).Flags
	for {
		old := atomic.LoadUint32(f)
		c := keptCount(old)
		if n >= 0 && c != uint32(n)%keptModulo {
			return c, false, nil
		}
		if atomic.CompareAndSwapUint32(f, old, old&^clear|set) {
			return c, true, nil
		}
	}
}

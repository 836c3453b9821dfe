// Ending a splice: the pump and the kernel stopped, every byte the kernel took delivered, the maps left, and the result reported.

package sockmap

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
)

// finish stops every direction, waits until every byte the kernel took was
// delivered, and leaves the maps.
func (s *splice) finish(ctx context.Context) {
	s.stopPump()
	if s.kernel && s.k.tail == nil {
		s.stopKernel(ctx)
	} else if s.kernel {
		s.leaveTx()
		s.dropState()
	}
	s.stopWaiters()
	if s.res.End == engine.EndReset {
		engine.ArmReset(s.p.Client)
		engine.ArmReset(s.p.Upstream())
	}
	if s.kernel {
		s.res.Moved[s.k.d] = int64(s.k.pre + s.k.flow.Redirected)
		if s.k.tail != nil {
			s.res.Moved[s.k.d] += s.k.tail.moved.Load()
		}
	}
	if s.other != nil {
		s.res.Moved[s.other.d] = s.other.moved.Load()
	}
	s.mu.Lock()
	s.finished = true
	for d := range 2 {
		s.p.AddBytes(engine.Direction(d), s.res.Moved[d]-s.reported[d])
		s.reported[d] = s.res.Moved[d]
	}
	s.mu.Unlock()
	s.e.unregister(s, s.k.srcCk)
}

// stopPump stops the user-space pumps; writes in progress complete when
// the pair is handed back.
func (s *splice) stopPump() {
	for _, p := range []*pump{s.other, s.k.tail} {
		if p == nil || p.done {
			continue
		}
		r := p.stop(s.res.End.KeepsPair(), s.opts.IdleTimeout)
		if r.end == pumpEOF {
			s.res.EOF[p.d] = true
		}
		if r.end == pumpFailed && s.res.End.KeepsPair() {
			s.done = false
			s.pumpEnded(p, r)
		}
	}
}

// stopKernel takes the kernel direction out of the maps without losing a
// byte: the parser is told to stop, the source leaves rx_socks only once its
// parser is quiet, and the destination leaves tx_socks only once it took
// every byte redirected to it.
func (s *splice) stopKernel(ctx context.Context) {
	k := &s.k
	objs := &s.e.dp.objs
	if k.inRx {
		k.ctl.Stop = 1
		objs.Ctls.Put(k.srcCk, k.ctl)
		if s.res.End != engine.EndReset {
			s.waitQuiet()
		}
		s.leaveRx()
		switch errno := soError(k.src); {
		case errno == 0 || errno == unix.ENOMSG:
		case s.res.End.KeepsPair():
			// A reset that arrived while stopping: the proxy must not get
			// a pair that is gone.
			s.res.End, s.res.Err = engine.EndReset, errno
			s.res.Dir = k.d
		}
	}
	objs.Flows.Lookup(k.srcCk, &k.flow)
	if s.res.End != engine.EndReset {
		s.opts.ReportDraining(true)
		s.waitDrained(ctx)
	}
	s.leaveTx()
	s.dropState()
	// A parser that was inside a read while the source left rx_socks may
	// have set its stop mark after the one taken above; the proxy must
	// not read it as the peer's error.
	if errno := soError(k.src); errno != 0 && errno != unix.ENOMSG && s.res.End.KeepsPair() {
		s.res.End, s.res.Dir, s.res.Err = engine.EndReset, k.d, errno
	}
}

// waitQuiet waits until the stopped parser can no longer be inside a read:
// it refused a byte, or it has consumed everything received and every
// parsed message went through the verdict.
func (s *splice) waitQuiet() {
	k := &s.k
	deadline := time.Now().Add(lingerCap)
	for d := minPoll; time.Now().Before(deadline); d = min(2*d, maxPoll) {
		if err := s.e.dp.objs.Flows.Lookup(k.srcCk, &k.flow); err != nil {
			return
		}
		if k.flow.Stopped == k.ctl.Gen || !s.inMap(s.e.dp.objs.RxSocks, k.srcCk) {
			return
		}
		ti, err := sockopt.TCPInfo(k.src)
		if err != nil {
			return
		}
		fin := uint64(0)
		if readHup(k.src) {
			fin = 1
		}
		if ti.Bytes_received == k.pos0+k.flow.Moved+fin && k.flow.Moved == k.flow.Redirected {
			return
		}
		time.Sleep(d)
	}
}

// waitDrained waits until the destination took every redirected byte. A
// pair handed back must be drained in full, unless its destination takes
// nothing for the idle timeout (the pair is then idle); one being torn
// down waits at most lingerCap.
func (s *splice) waitDrained(ctx context.Context) {
	k := &s.k
	keep := s.res.End.KeepsPair()
	deadline := time.Now().Add(lingerCap)
	var took uint64
	tookAt := time.Now()
	for d := minPoll; ; d = min(2*d, maxPoll) {
		dw, err := written(k.dst)
		if err != nil || dw-k.w0 >= k.flow.Redirected {
			return
		}
		if dw != took {
			took, tookAt = dw, time.Now()
		} else if idle := s.opts.IdleTimeout; keep && idle > 0 && time.Since(tookAt) >= idle {
			// The kernel took bytes the destination does not take: a
			// write stalled after the splice's end, as a pump's is.
			s.res.End, s.res.Dir, s.res.Err = engine.EndIdle, 1-k.d, engine.ErrStalledWrite
			return
		}
		if errno := soError(k.dst); errno != 0 && errno != unix.ENOMSG {
			s.res.End, s.res.Dir, s.res.Err = engine.EndReset, 1-k.d, errno
			return
		}
		if !keep && time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			if keep {
				s.res.End = engine.EndCancel
				keep = false
			}
		case <-time.After(d):
		}
	}
}

// report adds the bytes moved since the last report to the pair's counters.
func (s *splice) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	if s.kernel {
		var f spliceFlow
		if s.e.dp.objs.Flows.Lookup(s.k.srcCk, &f) == nil {
			n := int64(s.k.pre + f.Redirected)
			s.p.AddBytes(s.k.d, n-s.reported[s.k.d])
			s.reported[s.k.d] = n
		}
	}
	if s.other != nil {
		n := s.other.moved.Load()
		s.p.AddBytes(s.other.d, n-s.reported[s.other.d])
		s.reported[s.other.d] = n
	}
}

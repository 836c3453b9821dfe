// User-space pumps: a pair's second forwarded direction, and the tail of the kernel direction when its source cannot re-enter the map; exact to the byte and stoppable without losing one.

package sockmap

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

const pumpBuffer = 64 << 10

// maxSpuriousEPIPE bounds the retries of writes that failed with EPIPE on
// a socket still able to send (see writeAll).
const maxSpuriousEPIPE = 64

var bufPool = sync.Pool{New: func() any { b := make([]byte, pumpBuffer); return &b }}

// pumpEnd says how a pump ended.
type pumpEnd uint8

const (
	pumpEOF pumpEnd = iota
	pumpLimit
	pumpStopped
	pumpFailed
)

type pumpResult struct {
	end pumpEnd
	err error
	dst bool // the error came from writing
}

// pump copies one direction in user space.
type pump struct {
	d        engine.Direction
	pair     *engine.Pair
	src, dst *net.TCPConn
	limit    int64 // 0: until EOF
	moved    atomic.Int64
	ch       chan pumpResult
	done     bool
	result   pumpResult
	user     *atomic.Uint64 // engine-wide byte counter
	onStop   func()         // the kernel parser's stop mark met on dst
	poke     func()
}

func newPump(s *splice, d engine.Direction, limit int64) *pump {
	return &pump{
		d: d, pair: s.p, src: s.p.Src(d), dst: s.p.Dst(d), limit: limit,
		ch: make(chan pumpResult, 1), user: &s.e.userBytes,
		onStop: func() { s.event(eventStopped) }, poke: s.poke,
	}
}

// run copies until EOF, the limit, or a read deadline, and sends how it
// ended on p.ch.
func (p *pump) run() {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var done int64
	r := pumpResult{end: pumpLimit}
	for p.limit == 0 || done < p.limit {
		chunk := buf
		if p.limit > 0 && int64(len(chunk)) > p.limit-done {
			chunk = chunk[:p.limit-done]
		}
		n, rerr := p.read(chunk)
		if n > 0 {
			if err := p.writeAll(chunk[:n]); err != nil {
				r = pumpResult{end: pumpFailed, err: engine.StalledWrite(err), dst: true}
				break
			}
			done += int64(n)
			p.moved.Add(int64(n))
			p.user.Add(uint64(n))
		}
		if rerr != nil {
			r = p.readEnd(rerr)
			break
		}
	}
	p.ch <- r
	p.poke()
}

func (p *pump) readEnd(rerr error) pumpResult {
	switch {
	case errors.Is(rerr, io.EOF):
		// Every byte before the FIN was written: the FIN may follow.
		if err := p.pair.ForwardFIN(p.d); err != nil {
			return pumpResult{end: pumpFailed, err: err, dst: true}
		}
		return pumpResult{end: pumpEOF}
	case errors.Is(rerr, os.ErrDeadlineExceeded):
		return pumpResult{end: pumpStopped}
	}
	return pumpResult{end: pumpFailed, err: rerr}
}

// writeAll writes b in full. ENOMSG is not the peer's: it is the mark the
// kernel parser leaves on the kernel direction's source when it stops, and
// the first write to that socket reports it; the write is retried. EPIPE
// can be that same mark seen half: tcp_sendmsg saw sk_err set, and the
// engine's loop took it (SO_ERROR takes no socket lock) before the write
// could report it. Such a write sent nothing, so while the socket can still
// send it is retried too; a real EPIPE leaves the socket closed or shut.
func (p *pump) writeAll(b []byte) error {
	spurious := 0
	for len(b) > 0 {
		n, err := p.dst.Write(b)
		b = b[n:]
		switch {
		case err == nil:
			spurious = 0
		case errors.Is(err, unix.ENOMSG):
			p.onStop()
		case errors.Is(err, unix.EPIPE) && n == 0 && spurious < maxSpuriousEPIPE && canSend(p.dst):
			spurious++
			p.onStop()
		default:
			return err
		}
	}
	return nil
}

// read reads from the source, skipping the parser's ENOMSG mark that a
// read reports when the receive queue is empty (never a TCP error).
func (p *pump) read(b []byte) (int, error) {
	for {
		n, err := p.src.Read(b)
		if n == 0 && errors.Is(err, unix.ENOMSG) {
			continue
		}
		return n, err
	}
}

// poll returns the pump's result once it ended.
func (p *pump) poll() (pumpResult, bool) {
	if p.done {
		return p.result, false
	}
	select {
	case p.result = <-p.ch:
		p.done = true
		return p.result, true
	default:
		return pumpResult{}, false
	}
}

// stop interrupts the pump's read and waits for it; a write in progress
// completes unless finish is false (the pair is ending anyway), within
// idle (0: no bound) for a peer that takes nothing.
func (p *pump) stop(finishWrites bool, idle time.Duration) pumpResult {
	if p.done {
		return p.result
	}
	past := time.Unix(1, 0)
	p.src.SetReadDeadline(past)
	if !finishWrites {
		p.dst.SetWriteDeadline(past)
	}
	if finishWrites && idle > 0 {
		done := make(chan struct{})
		go func() { p.result = <-p.ch; close(done) }()
		engine.WaitWhileTaken(done, idle, p.dst)
		<-done
	} else {
		p.result = <-p.ch
	}
	p.done = true
	p.src.SetReadDeadline(time.Time{})
	p.dst.SetWriteDeadline(time.Time{})
	return p.result
}

// Moving a body of known length in control mode: copied through a buffer, copied by the kernel (splice(2) without an engine), or handed to the engine; and when each pays.

package httpcore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/proxy"
)

// bodyEndedError: a body's source stopped (EOF or a read error) with
// missing bytes of the length its head gave still to come.
type bodyEndedError struct {
	d       engine.Direction
	missing int64
	err     error
}

func (e *bodyEndedError) Error() string {
	return fmt.Sprintf("%s body ended %d bytes early: %v", e.d, e.missing, e.err)
}

func (e *bodyEndedError) Unwrap() error { return e.err }

// WatchedWriter keeps the first error of W's writes (Err), telling a
// failed write from a failed read in a copy between the two: which side of
// a relayed body failed, the client or the upstream.
type WatchedWriter struct {
	W   io.Writer
	Err error
}

func (w *WatchedWriter) Write(b []byte) (int, error) {
	n, err := w.W.Write(b)
	if err != nil && w.Err == nil {
		w.Err = err
	}
	return n, err
}

// DefaultCopyBelow is the largest rest of a response body (what did not
// come with the head) the proxy copies itself, in control mode, unless
// Conn.CopyBelow says otherwise (http-forward keeps it: seed 002's
// experiment splices its GET bodies); larger ones are spliced. Below it
// a splice (an engine, its goroutines, a pipe, the ladder's bookkeeping:
// 24 allocations) costs more than it saves. Measured on loopback with
// BenchmarkHTTPReverse's process CPU per request, engine pipe, medians of
// 3 (2 vCPUs, Linux 6.18), splice vs copy through the 16 KiB head reader:
// 16 KiB 122 vs 119 µs, 24 KiB 144 vs 118, 32 KiB 151 vs 137, 48 KiB 171
// vs 172, 64 KiB 176 vs 212, 100 KiB 208 vs 261.
const DefaultCopyBelow = 32 << 10

// ReverseCopyBelow is http-reverse's Conn.CopyBelow where no engine of the
// listener's ladder splices shorter bodies with gain (engine.MinLimited:
// ip's min_body lowers it). Copying reads straight into a 64 KiB buffer
// (bodyBufs), and then beats splicing with pipe well past the old 32 KiB:
// through the bench's lab under wrk (-t2 -c16, keep-alive, 2026-11-27),
// the proxy's own CPU per request and the rate, pipe against copy:
// 64 KiB 47-49 µs (10.3-11.6k/s) against 32-34 (12.5-12.7k), 100 KiB
// 53-54 (9.3-9.6k) against 40-41 (10.8-11.0k; 256 KiB buffer), 256 KiB
// 92-111 (5.6-6.3k) against 66-67 (7.5-7.6k), 512 KiB 219-220
// (2.6k) against 201-215 (2.8k); level at 384 KiB and 1 MiB. One byte
// short of 512 KiB: a body of 512 KiB is the engines' (engines.ip.min_body
// set to 512KiB makes it ip's). Those figures are the buffer's: a copied
// rest past kernelCopyAbove now moves in the kernel where the client does
// not pace (paced), which under cubic also
// beats ip at 1 and 4 MiB (6.3-6.4k/s against 6.0k, 1.54-1.62k against
// 1.45-1.50k) but not under bbr, where ip leads from 1 MiB: the bound
// stays.
const ReverseCopyBelow = 512<<10 - 1

// copiesRest reports whether a body of n bytes, of which src (its
// source's head reader) holds the first, is copied rather than spliced:
// whether what a splice would carry (its byte limit) is at most
// c.CopyBelow, or DefaultCopyBelow when that is 0. Request and response
// bodies go by the same rule. Every body of a pair that only user space
// can move (inUserSpace) is copied, whatever its length.
func (c *Conn) copiesRest(n int64, src *bufio.Reader) bool {
	if c.inUserSpace() {
		return true
	}
	bound := c.CopyBelow
	if bound <= 0 {
		bound = DefaultCopyBelow
	}
	return n-int64(src.Buffered()) <= bound
}

// bodyBufs are the buffers copyResponse reads a body into once the head
// reader is empty: a body read 64 KiB at a time costs a quarter of the
// system calls of one read through the 16 KiB head reader. Taken for one
// body only, so an idle connection holds none.
var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// copyResponse sends head and a body of n bytes, copied in control mode:
// head and what came with it in one writev, then the rest (copyBody).
func (c *Conn) copyResponse(head []byte, n int64) error {
	return c.copyBody(engine.Down, c.up.r, n, func(b []byte) error { return c.writeClientv(head, b) })
}

// copyBody copies n bytes of body from src (the head reader of d's
// source) to d's destination in control mode: a write per read, each
// read through src's buffer, or into a body buffer (bodyBufs) while more
// than that buffer holds remains, or, once src is empty and more than
// kernelCopyAbove remains, in the kernel (kernelCopy), unless the
// destination paces (paced). first, if not nil, writes the first part
// instead (with the head, in one writev).
func (c *Conn) copyBody(d engine.Direction, src *bufio.Reader, n int64, first func([]byte) error) error {
	defer c.streaming()() // a stalled peer must not hold the pair past its bound
	var buf *[]byte
	defer func() {
		if buf != nil {
			bodyBufs.Put(buf)
		}
	}()
	kernel := n > kernelCopyAbove && !c.inUserSpace() && !c.paced(d)
	for start := true; n > 0; start = false {
		if kernel && !start && src.Buffered() == 0 && n > kernelCopyAbove {
			k, err := c.kernelCopy(d, n)
			n -= k
			if err != nil {
				return err
			}
			continue
		}
		var b []byte
		peeked := false // b is in src's buffer, to discard once written
		if !start && src.Buffered() == 0 && n > int64(src.Size()) {
			// src is empty and more than it holds remains: a read into
			// p bypasses its buffer (bufio.Reader.Read).
			if buf == nil {
				buf = bodyBufs.Get().(*[]byte)
			}
			k, err := src.Read((*buf)[:min(int64(len(*buf)), n)])
			if k == 0 && err != nil {
				return &bodyEndedError{d, n, err}
			}
			b = (*buf)[:k]
		} else {
			if src.Buffered() == 0 {
				if _, err := src.Peek(1); err != nil {
					return &bodyEndedError{d, n, err}
				}
			}
			b, _ = src.Peek(int(min(int64(src.Buffered()), n)))
			peeked = true
		}
		var err error
		if start && first != nil {
			err = first(b)
		} else {
			err = c.write(d, b)
		}
		if peeked {
			src.Discard(len(b))
		}
		if err != nil {
			return err
		}
		n -= int64(len(b))
	}
	return nil
}

// inUserSpace reports whether the pair's bytes can be moved only by the
// process: its client side (NewConnOn) or its current upstream
// (UpstreamTLS) is TLS, so what that socket carries is records
// crypto/tls must seal or open, and neither an engine nor splice(2) may
// move a body.
func (c *Conn) inUserSpace() bool { return c.clientTLS || c.up != nil && c.up.tls != nil }

// kernelCopyAbove is the longest rest of a body copyBody moves through a
// buffer of its own rather than with kernelCopy. Through the bench's lab
// under wrk (-t2 -c16, keep-alive, cubic, nginx origin, 2026-11-27), the
// rate and the proxy's own CPU per request, kernelCopy against the
// buffer: 256 KiB 18.4-18.5k req/s at 38 µs against 14.6k at 59 µs;
// 100 KiB 28.8-30.3k at 28-29 µs against 27.3-28.6k at 32 µs; 64 KiB
// (spliced whole where the head came alone) 32.3-33.7k against 35.5-35.6k:
// a body of 64 KiB or less is copied.
const kernelCopyAbove = 64 << 10

// kernelCopyChunk bounds one kernelCopy, so that the idle deadlines are
// refreshed while bytes move.
const kernelCopyChunk = 256 << 10

// paced reports whether d's destination paces what it sends: whether its
// congestion control is bbr, under which a body kernelCopy moves costs
// more than one copied through a buffer. 256 KiB bodies under bbr (the
// bench's lab, wrk -t2 -c16) took 150-158 µs of the proxy's CPU each and
// 5.0-5.3k req/s, against 63-69 µs and 7.4-7.6k copied. An unknown
// congestion control counts as not paced. A connection is asked once
// (the option's read allocates): the client's answer is kept for the
// Conn's life, an upstream's until a body goes to another upstream.
func (c *Conn) paced(d engine.Direction) bool {
	dst := c.S.Pair().Dst(d)
	cache := &c.clientPacing
	if d == engine.Up {
		if dst != c.upPaced {
			c.upPaced, c.upPacing = dst, pacingUnknown
		}
		cache = &c.upPacing
	}
	if *cache == pacingUnknown {
		*cache = pacingOf(dst)
	}
	return *cache == pacingOn
}

// pacing is what paced learnt of a connection.
type pacing uint8

const (
	pacingUnknown pacing = iota
	pacingOff
	pacingOn
)

// pacingOf reads conn's congestion control (TCP_CONGESTION); one it
// cannot read is not bbr.
func pacingOf(conn *net.TCPConn) pacing {
	var name string
	sockopt.WithFD(conn, func(fd int) (err error) {
		name, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		return err
	})
	if strings.HasPrefix(name, "bbr") {
		return pacingOn
	}
	return pacingOff
}

// kernelCopy moves up to n bytes (at most kernelCopyChunk) from d's
// source to its destination with splice(2) through a pipe, in the
// kernel: net.TCPConn.ReadFrom does it for a LimitedReader over a
// TCPConn (internal/poll.Splice, with its pooled 1 MiB pipes, waiting
// on Go's poller). The bytes' pages are passed on, never copied into
// the process. It returns how many moved, with an error if the source
// ended first.
func (c *Conn) kernelCopy(d engine.Direction, n int64) (int64, error) {
	p := c.S.Pair()
	if d == engine.Down {
		c.clientFull() // the splice waits for the client to take each part
	} else {
		c.clientIn.refresh()
	}
	c.up.dl.refresh(c.upIdle(), &c.stopped)
	want := min(n, kernelCopyChunk)
	c.limited = io.LimitedReader{R: p.Src(d), N: want}
	k, err := p.Dst(d).ReadFrom(&c.limited)
	c.limited.R = nil
	p.AddBytes(d, k)
	if d == engine.Down {
		c.curKernel += k
	} else {
		c.clientIn.n += k // the client's bytes, read past clientIn
	}
	if err == nil && k < want {
		err = &bodyEndedError{d, n - k, io.ErrUnexpectedEOF}
	}
	return k, err
}

// captureStart is the first size of a captured body's buffer.
const captureStart = 16 << 10

// captureBody copies n bytes of body from the upstream to the client in
// control mode, each part as it arrives, and returns them. The buffer grows
// with what arrived, never ahead of it: a Content-Length is the origin's
// claim, and an origin that declares 10 MB and stalls must not cost 10 MB.
func (c *Conn) captureBody(n int64) ([]byte, error) {
	defer c.streaming()()
	body := make([]byte, 0, min(n, captureStart))
	for int64(len(body)) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, int(min(n-int64(len(body)), int64(len(body)))))
		}
		part := body[len(body):min(int64(cap(body)), n)]
		k, err := c.up.r.Read(part)
		if k > 0 {
			if werr := c.writeClient(part[:k]); werr != nil {
				return nil, werr
			}
			body = body[:len(body)+k]
		}
		if err == io.EOF && int64(len(body)) < n {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	return body, nil
}

// spliceBody forwards exactly n bytes in direction d: first what src (the
// head reader of d's source) already holds, then the rest through the
// listener's engine with a byte limit, the other direction held, so the
// proxy is back in control mode right after the body.
func (c *Conn) spliceBody(ctx context.Context, d engine.Direction, src *bufio.Reader, n int64) error {
	if k := min(int64(src.Buffered()), n); k > 0 {
		b, _ := src.Peek(int(k))
		if err := c.write(d, b); err != nil {
			return err
		}
		src.Discard(int(k))
		n -= k
	}
	if n == 0 {
		return nil
	}
	opts := engine.Options{IdleTimeout: c.upIdle()} // the response's, moving alone
	if d == engine.Up {
		opts.IdleTimeout = c.clientIn.idle // the client's body, alone moving (bodyIdle)
	}
	held := engine.DirOptions{Mode: engine.Hold}
	for {
		limited := engine.DirOptions{Mode: engine.Forward, Limit: n}
		if d == engine.Up {
			opts.Up, opts.Down = limited, held
		} else {
			opts.Up, opts.Down = held, limited
		}
		if pace := c.clientIn.pace; d == engine.Up && pace != nil {
			// The engine hands the pair back by the body's pace
			// deadline, which the bytes it moved then push further.
			left := time.Until(pace.deadline(c.clientIn.n))
			if left <= 0 {
				return errBodySlow
			}
			opts.For = left
		}
		r, err := c.Splice(ctx, opts)
		n -= r.Moved[d]
		if d == engine.Down {
			c.curSpliced += r.Moved[d]
		} else {
			c.clientIn.n += r.Moved[d]
		}
		switch {
		case err != nil:
			return err
		case r.End == engine.EndTimer && n > 0:
			continue
		case r.End == engine.EndEOF:
			return &bodyEndedError{d, n, io.ErrUnexpectedEOF}
		case r.End != engine.EndLimit && r.End != engine.EndTimer:
			return proxy.EndErr(r)
		}
		return nil
	}
}

// spliceToEOF forwards the rest of a response that ends when the upstream
// closes: what the head reader holds, then everything until EOF.
func (c *Conn) spliceToEOF(ctx context.Context) error {
	if k := c.up.r.Buffered(); k > 0 {
		b, _ := c.up.r.Peek(k)
		if err := c.writeClient(b); err != nil {
			return err
		}
		c.up.r.Discard(k)
	}
	if c.inUserSpace() {
		defer c.streaming()()
		_, err := io.Copy(c.clientWriter(), c.up.r)
		return err
	}
	r, err := c.Splice(ctx, engine.Options{IdleTimeout: c.upIdle(), Up: engine.DirOptions{Mode: engine.Hold}})
	c.curSpliced += r.Moved[engine.Down]
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// Conn: one client connection, its current upstream, and relaying one request and its response.

package httpcore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/proxy"
)

// readerSize is the buffer of the head readers: a request head usually fits,
// and whatever body it reads ahead is written out before splicing.
const readerSize = 16 << 10

// Conn is one client connection of an HTTP proxy and the upstream its last
// request went to.
type Conn struct {
	// S is the pair's session.
	S proxy.Session
	// Limits bound request heads.
	Limits Limits
	// Idle bounds waiting for the next request, for a response head, and
	// splices in which nothing moves; 0 never times out.
	Idle time.Duration
	// served is set once a request head was read: RequestTimeout bounds
	// only the first.
	served bool
	// ProxyProtocol ("v1", "v2" or "") is sent on each new upstream
	// connection, with the client's address.
	ProxyProtocol string
	// CopyBelow is the largest rest of a response body with a length
	// (what did not come with the head: a splice's byte limit) the proxy
	// copies itself, in control mode, instead of splicing it; 0:
	// DefaultCopyBelow.
	CopyBelow int64
	// upgrade is the protocol the current request asks to switch to
	// (WebSocket, say), "" for none or one the proxy refuses (h2c).
	upgrade string
	// cur is the request being served, since curStart: what
	// RecordRequest reports. curDown is the client's byte count when the
	// last answer was recorded (record), so that an answer is what the
	// count grew by until it is, a refused head's too; curKernel and
	// curSpliced are what of it kernelCopy and an engine moved
	// (proxy.Request's Kernel and Spliced).
	cur                   *http.Request
	curStart              time.Time
	curDown               int64
	curKernel, curSpliced int64

	// Pool, if not nil, shares upstream connections with the listener's
	// other client connections: the current one goes back to it when the
	// next request goes elsewhere or the client connection ends, and Use
	// takes one from it before dialling.
	Pool *UpstreamPool
	// Class is added to Use's key in the pool: connections made for a
	// client connection of another class are not interchangeable (see
	// proxy.DialClass).
	Class string
	// mem, if not nil, is where each request and response is built, in
	// the memory of the last ones (see Reuse).
	mem *exchangeMem
	// requests counts the request heads read.
	requests int
	// stopped is set when the pair is interrupted: its upstream may carry
	// a deadline in the past and goes to no pool.
	stopped atomic.Bool
	// stop ends the wait for a next request when a graceful shutdown begins.
	stop stopWatch
	// clientDeadline: ReadRequest left a read deadline on the client.
	clientDeadline bool
	// head is where the heads the proxy writes are built, one at a time,
	// each written before the next is built.
	head []byte
	// clientIP is ClientIP's answer, once asked.
	clientIP string
	// limited is kernelCopy's reader, kept so that it allocates nothing.
	limited io.LimitedReader
	// clientPacing caches paced's answer for the client connection, and
	// upPacing for upPaced, the upstream it was last asked of.
	clientPacing, upPacing pacing
	upPaced                *net.TCPConn
	// clientW and upW write to the client and the current upstream.
	clientW, upW rawWriter

	client   *bufio.Reader
	clientIn idleReader // what client reads from
	clientDL idleDeadline
	up       *upstream
	// upIn and upR read every upstream of the connection in turn: one
	// buffer, reset for each new upstream (its last one left none unread).
	upIn idleReader
	upR  *bufio.Reader
}

// idleReader reads a connection; while on, each read must bring something
// within idle (the proxy streams a chunked body or fills its cache in
// control mode: a stalled peer must not hold the pair past idle_timeout).
// Off, the caller's own deadlines (header and request timeouts) apply.
type idleReader struct {
	dl      *idleDeadline
	idle    time.Duration
	on      bool
	stopped *atomic.Bool
	n       int64 // bytes read: whether a response began

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
	rc          syscall.RawConn
	pair        *engine.Pair
	raw         rawStep
	step        func(fd uintptr) bool
}

func (r *idleReader) Read(b []byte) (int, error) {
	if r.on {
		r.dl.refresh(r.idle, r.stopped)
	}
	if r.send != nil || r.send2 != nil {
		return r.sendThenRead(b)
	}
	if r.rc != nil && len(b) > 0 {
		return r.rawRead(b)
	}
	n, err := r.dl.conn.Read(b)
	r.n += int64(n)
	return n, err
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
			return false
		}
		st.n, st.rerr = max(n, 0), err
		return true
	}
}

// idleDeadline keeps one standing deadline, for reads and writes, between
// idle and idle*17/16 ahead of every read or write of a connection in
// control mode: it moves only when less than idle is left. Setting a
// deadline and lifting it around each read and write cost ~1 µs a request
// (eight runtime timer updates); this is one update per idle/16, and a
// peer stalls the pair for at most idle/16 longer than idle_timeout.
// Engines must not see it: Conn.Splice lifts it first.
type idleDeadline struct {
	conn *net.TCPConn
	// at is the deadline in place; zero when there is none, or when
	// other code set one (forget), so that refresh sets it anew.
	at time.Time
}

// refresh makes the deadline at least idle ahead (idle 0: no deadline).
// stopped set means the pair was interrupted: the deadline is put back in
// the past, in case the interrupt ran between the check and the set.
func (d *idleDeadline) refresh(idle time.Duration, stopped *atomic.Bool) {
	if idle <= 0 {
		return
	}
	now := time.Now()
	if d.at.Sub(now) >= idle {
		return
	}
	d.at = now.Add(idle + idle/16)
	d.conn.SetDeadline(d.at)
	if stopped.Load() {
		d.conn.SetDeadline(past)
	}
}

// lift removes the deadline refresh set, if any.
func (d *idleDeadline) lift() {
	if !d.at.IsZero() {
		d.conn.SetDeadline(time.Time{})
		d.at = time.Time{}
	}
}

// passed reports whether the deadline refresh set is over.
func (d *idleDeadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }

// forget says other code changed the deadline: the next refresh sets it.
func (d *idleDeadline) forget() { d.at = time.Time{} }

// streaming turns idle deadlines on for reads from both peers until the
// returned function runs.
func (c *Conn) streaming() (done func()) {
	c.clientIn.on = true
	if c.up != nil {
		c.up.in.on = true
	}
	return func() {
		c.clientIn.on = false
		if c.up != nil {
			c.up.in.on = false
		}
	}
}

// Splice hands the pair to the listener's engine (Session.Splice) after
// lifting the control-mode deadlines, which the engine's reads must not see.
func (c *Conn) Splice(ctx context.Context, opts engine.Options) (engine.Result, error) {
	c.clientDL.lift()
	if c.up != nil {
		c.up.dl.lift()
	}
	return c.S.Splice(ctx, opts)
}

// Reuse has the requests ReadRequest returns and the responses RoundTrip
// returns built in the memory of the connection's last ones: for a proxy
// that keeps neither, nor their header maps, nor any string of theirs
// once Relay returned. Their strings share the memory of the head they
// were read from, which the next head overwrites: a proxy that keeps one
// clones it (strings.Clone). Formatting one into a log line or an error
// while the exchange lives is no keeping.
func (c *Conn) Reuse() {
	if c.mem == nil {
		c.mem = new(exchangeMem)
	}
}

// NewConn starts serving the client of s.
func NewConn(s proxy.Session, lim Limits, idle time.Duration) *Conn {
	c := &Conn{S: s, Limits: lim, Idle: idle}
	c.clientDL.conn = s.Pair().Client
	c.clientIn = idleReader{dl: &c.clientDL, idle: idle, stopped: &c.stopped, early: true}
	if rc, err := s.Pair().Client.SyscallConn(); err == nil {
		c.clientIn.rc = rc
	}
	c.clientW.use(s.Pair().Client, c.clientIn.rc)
	c.stop.done = make(chan struct{})
	c.client = bufio.NewReaderSize(&c.clientIn, readerSize)
	return c
}

// interrupt makes every blocked read or write of the pair in control mode
// fail at once (shutdown); a splice in progress ends by the same context.
func (c *Conn) interrupt() {
	c.stopped.Store(true)
	p := c.S.Pair()
	p.Client.SetDeadline(past)
	if up := p.Upstream(); up != nil {
		up.SetDeadline(past)
	}
}

func (c *Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	c.up.idle = false
	c.head = appendRequestHead(c.head[:0], req, c.upgrade)
	c.up.dl.refresh(c.Idle, &c.stopped)
	if requestBody(req) == bodyNone && c.up.r.Buffered() == 0 && c.up.in.rc != nil {
		// The head goes with the first read of the response: one wait,
		// no read that could only find nothing.
		c.up.in.send = c.head
	} else {
		if err := c.writeUp(c.head); err != nil {
			return nil, err
		}
		if err := c.relayRequestBody(ctx, req); err != nil {
			return nil, err
		}
		c.up.dl.refresh(c.Idle, &c.stopped)
	}
	if ctx.Err() != nil {
		c.up.in.send = nil
		return nil, ctx.Err() // interrupt may have run before the deadline above
	}
	resp, err := c.readResponse(ctx, req)
	c.up.in.send = nil // sent, unless the read failed first
	return resp, err
}

// relayRequestBody sends the request body upstream: copied or spliced
// when its length is known (as a response body is), streamed chunk by
// chunk otherwise.
func (c *Conn) relayRequestBody(ctx context.Context, req *http.Request) error {
	kind := requestBody(req)
	if kind != bodyNone && strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// The client waits for this before sending the body; the proxy
		// says it for the upstream, as it relays the body anyway.
		if err := c.writeClient([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return err
		}
	}
	if kind == bodyNone {
		return nil
	}
	defer c.bodyIdle()()
	switch kind {
	case bodyLength:
		var err error
		if c.copiesRest(req.ContentLength, c.client) {
			err = c.copyBody(engine.Up, c.client, req.ContentLength, nil)
		} else {
			err = c.spliceBody(ctx, engine.Up, c.client, req.ContentLength)
		}
		if c.bodyStalled(err) {
			return c.bodyTimedOut(err)
		}
		if ended := (*bodyEndedError)(nil); errors.As(err, &ended) && ended.d == engine.Up && !errors.Is(err, os.ErrDeadlineExceeded) {
			return badRequestBody("request body ended early", err)
		}
		return err
	case bodyChunked:
		c.S.NoSplice("chunked request body streamed in control mode")
		defer c.streaming()()
		up := &WatchedWriter{W: c.upWriter()}
		err := copyChunked(up, c.client)
		if up.Err == nil && c.bodyStalled(err) {
			return c.bodyTimedOut(err)
		}
		if err != nil && up.Err == nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			// Not the upstream's, nor a timeout: the client's body was
			// malformed or ended early.
			return badRequestBody("malformed or unfinished chunked request body", err)
		}
		return err
	}
	return nil
}

// bodyIdle bounds the client's reads by Limits.BodyTimeout, when that is
// shorter than the idle timeout, until the returned function runs: while
// a request body comes, a client that stalls is cut off sooner than one
// that is idle between requests.
func (c *Conn) bodyIdle() (restore func()) {
	bt := BodyIdle(c.Idle, c.Limits.BodyTimeout)
	if bt == c.Idle {
		return func() {}
	}
	c.clientIn.idle = bt
	c.clientDL.forget() // the standing deadline may be further off
	return func() {
		c.clientIn.idle = c.Idle
		if c.Idle <= 0 {
			c.clientDL.lift() // idle_timeout 0: no deadline between requests
		}
	}
}

// bodyStalled reports whether err ended a request body because the
// client sent nothing of it for its idle bound (bodyIdle): the client's
// deadline passed, or the engine splicing the body found nothing moving
// (the other way is held), and the pair was not interrupted.
func (c *Conn) bodyStalled(err error) bool {
	if err == nil || c.stopped.Load() {
		return false
	}
	var se *proxy.SpliceEnd
	if errors.As(err, &se) {
		return se.End == engine.EndIdle
	}
	// A deadline error is the client's when its deadline passed and the
	// upstream's, which a blocked write of the body would meet, did not.
	return errors.Is(err, os.ErrDeadlineExceeded) && c.clientDL.passed() && (c.up == nil || !c.up.dl.passed())
}

// bodyTimedOut is the 408 for a request body the client stopped sending.
func (c *Conn) bodyTimedOut(err error) *StatusError {
	return &StatusError{Status: http.StatusRequestTimeout, Reason: StalledBody(c.clientIn.idle), Err: err}
}

// BodyIdle is the bound on each wait for more of a request body, in every
// HTTP kind: body (http.body_timeout) where it is shorter than idle
// (idle_timeout; 0 is never), else idle.
func BodyIdle(idle, body time.Duration) time.Duration {
	if body > 0 && (idle <= 0 || body < idle) {
		return body
	}
	return idle
}

// StalledBody is the reason of the 408 for a request body of which
// nothing came for idle.
func StalledBody(idle time.Duration) string {
	return "request body stalled: nothing of it for " + idle.String()
}

// badRequestBody is the 400 for a request body the client got wrong: its
// fault, not the upstream's (a 502 would say the server failed).
func badRequestBody(reason string, err error) *StatusError {
	return &StatusError{Status: http.StatusBadRequest, Reason: reason, Err: err}
}

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

// Relay sends the response to the client: the head, then the body, spliced
// when its length is known. When capture is not nil and the body's length is
// at most capture's limit, the body is copied in control mode instead and
// returned, for a cache. Relay reports whether the client connection can
// carry another request.
func (c *Conn) Relay(ctx context.Context, req *http.Request, resp *http.Response, capture int64) (keep bool, body []byte, err error) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		c.record(resp.StatusCode)
		return false, nil, c.relaySwitch(ctx, resp)
	}
	defer func() { c.record(resp.StatusCode) }()
	kind := responseBody(req, resp)
	keep = !req.Close && kind != bodyUntilClose
	upKeep := keep && !resp.Close
	head := appendResponseHead(c.head[:0], req, resp, kind, keep)
	c.head = head
	if kind == bodyLength && capture <= 0 && c.up.in.rc != nil &&
		int64(c.up.r.Buffered()) < resp.ContentLength && resp.ContentLength <= int64(c.up.r.Size()) {
		// What more of a body that fits in the reader's buffer has
		// arrived already is read into it (the origin wrote a 10 KiB
		// object in two writes, say): if that completes the body, the
		// response leaves whole, in one sendmsg, instead of a writev,
		// reads and writes. It does not wait: a body that trickles in
		// is relayed as it comes (copyResponse), and any error is met
		// again there.
		c.up.in.noWait = true
		c.up.r.Peek(int(resp.ContentLength))
		c.up.in.noWait = false
	}
	if kind == bodyLength && capture <= 0 && int64(c.up.r.Buffered()) >= resp.ContentLength {
		// The whole body came with the head (small objects): head and
		// body leave in one writev, not two writes and a splice setup.
		body, _ := c.up.r.Peek(int(resp.ContentLength))
		var err error
		if keep && c.clientIn.rc != nil {
			c.deferResponse(head, body)
		} else {
			err = c.writeClientv(head, body)
		}
		c.up.r.Discard(len(body))
		c.responseRead(upKeep) // the client's failure leaves the upstream as good as ever
		return keep && err == nil, nil, err
	}
	if kind == bodyLength && capture <= 0 && c.copiesRest(resp.ContentLength, c.up.r) {
		if err := c.copyResponse(head, resp.ContentLength); err != nil {
			return false, nil, err
		}
		c.responseRead(upKeep)
		return keep, nil, nil
	}
	if err := c.writeClient(head); err != nil {
		return false, nil, err
	}
	switch kind {
	case bodyLength:
		if capture > 0 && resp.ContentLength <= capture {
			body, err = c.captureBody(resp.ContentLength)
		} else {
			err = c.spliceBody(ctx, engine.Down, c.up.r, resp.ContentLength)
		}
	case bodyChunked:
		c.S.NoSplice("chunked response body streamed in control mode")
		done := c.streaming()
		err = copyChunked(c.clientWriter(), c.up.r)
		done()
	case bodyUntilClose:
		err = c.spliceToEOF(ctx)
	}
	if err != nil {
		return false, nil, err
	}
	c.responseRead(upKeep)
	return keep, body, nil
}

// deferResponse has a response that came whole with its head written by
// the read that waits for the client's next request (sendThenRead), head
// and body in one sendmsg. The body is not copied: it stays in
// the upstream reader's buffer, which nothing refills before that read
// (the next request must be read before anything goes upstream), nor
// resets (a new upstream is attached only for a request). Its bytes are
// counted now, for the request's record. flush writes it first if anything
// else comes before that read.
func (c *Conn) deferResponse(head, body []byte) {
	c.clientIn.send, c.clientIn.send2 = head, body
	c.S.Pair().AddBytes(engine.Down, int64(len(head)+len(body)))
}

// flush writes a deferred response, if one is pending.
func (c *Conn) flush() error {
	if c.clientIn.send == nil && c.clientIn.send2 == nil {
		return nil
	}
	c.clientDL.refresh(c.Idle, &c.stopped)
	b1, b2 := c.clientIn.send, c.clientIn.send2
	c.clientIn.send, c.clientIn.send2 = nil, nil
	_, err := c.clientW.writev(b1, b2)
	return err
}

// record reports the current request, answered with status, to the
// session if it records requests; once per request.
func (c *Conn) record(status int) {
	req := c.cur
	if req == nil {
		if status < 400 {
			return
		}
		// A head refused before it parsed: counted all the same.
		req = &http.Request{URL: &url.URL{}}
	}
	c.cur = nil
	rr, ok := c.S.(proxy.RequestRecorder)
	if !ok {
		return
	}
	host := req.Host
	if host == "" && req.URL != nil {
		host = req.URL.Host
	}
	now, end := c.S.Pair().Bytes(engine.Down), time.Now()
	rr.RecordRequest(proxy.Request{Method: req.Method, Host: host, Path: req.URL.Path, Status: status,
		Bytes: max(now-c.curDown, 0), Kernel: c.curKernel, Spliced: c.curSpliced, Duration: end.Sub(c.curStart)})
	// The next answer counts from here. A head refused before it parsed
	// starts no request, so its time counts from here too.
	c.curStart, c.curDown, c.curKernel, c.curSpliced = end, now, 0, 0
}

// Record reports the current request as answered with status, for
// answers the proxy writes itself (a cache hit, a CONNECT tunnel).
func (c *Conn) Record(status int) { c.record(status) }

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
// bodies go by the same rule.
func (c *Conn) copiesRest(n int64, src *bufio.Reader) bool {
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
	defer c.streaming()() // a stalled peer must not hold the pair past idle_timeout
	var buf *[]byte
	defer func() {
		if buf != nil {
			bodyBufs.Put(buf)
		}
	}()
	kernel := n > kernelCopyAbove && !c.paced(d)
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
	c.clientDL.refresh(c.clientIn.idle, &c.stopped)
	c.up.dl.refresh(c.Idle, &c.stopped)
	want := min(n, kernelCopyChunk)
	c.limited = io.LimitedReader{R: p.Src(d), N: want}
	k, err := p.Dst(d).ReadFrom(&c.limited)
	c.limited.R = nil
	p.AddBytes(d, k)
	if d == engine.Down {
		c.curKernel += k
	}
	if err == nil && k < want {
		err = &bodyEndedError{d, n - k, io.ErrUnexpectedEOF}
	}
	return k, err
}

// captureBody copies n bytes of body from the upstream to the client in
// control mode and returns them.
func (c *Conn) captureBody(n int64) ([]byte, error) {
	defer c.streaming()()
	body := make([]byte, n)
	if _, err := io.ReadFull(c.up.r, body); err != nil {
		return nil, err
	}
	return body, c.writeClient(body)
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
	opts := engine.Options{IdleTimeout: c.Idle}
	if d == engine.Up {
		opts.IdleTimeout = c.clientIn.idle // the client's body, alone moving (bodyIdle)
	}
	limited := engine.DirOptions{Mode: engine.Forward, Limit: n}
	held := engine.DirOptions{Mode: engine.Hold}
	if d == engine.Up {
		opts.Up, opts.Down = limited, held
	} else {
		opts.Up, opts.Down = held, limited
	}
	r, err := c.Splice(ctx, opts)
	if d == engine.Down {
		c.curSpliced += r.Moved[d]
	}
	if err != nil {
		return err
	}
	if r.End != engine.EndLimit {
		if r.End == engine.EndEOF {
			return &bodyEndedError{d, n - r.Moved[d], io.ErrUnexpectedEOF}
		}
		return proxy.EndErr(r)
	}
	return nil
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
	r, err := c.Splice(ctx, engine.Options{IdleTimeout: c.Idle, Up: engine.DirOptions{Mode: engine.Hold}})
	c.curSpliced += r.Moved[engine.Down]
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// write sends b in direction d in control mode and counts it; a peer that
// takes nothing for idle_timeout ends the pair.
func (c *Conn) write(d engine.Direction, b []byte) error {
	p := c.S.Pair()
	dst := p.Dst(d)
	w := &c.clientW
	if d == engine.Down {
		c.clientDL.refresh(c.Idle, &c.stopped)
	} else {
		c.up.dl.refresh(c.Idle, &c.stopped)
		w = &c.upW
	}
	var n int
	var err error
	if w.conn == dst && w.rc != nil {
		n, err = w.writev(b, nil)
	} else {
		n, err = dst.Write(b)
	}
	p.AddBytes(d, int64(n))
	return err
}

func (c *Conn) writeClient(b []byte) error { return c.write(engine.Down, b) }

// writeClientv sends a head and a body to the client in one sendmsg.
func (c *Conn) writeClientv(head, body []byte) error {
	c.clientDL.refresh(c.Idle, &c.stopped)
	n, err := c.clientW.writev(head, body)
	c.S.Pair().AddBytes(engine.Down, int64(n))
	return err
}

// rawWriter writes to a connection with raw, non-blocking calls
// (rawio.go), waiting in the poller while the socket's buffer is full:
// what Write does, without the runtime's system call, which hands the P
// over when it seems to block and keeps sysmon polling (see rawRead).
type rawWriter struct {
	conn *net.TCPConn
	rc   syscall.RawConn
	st   rawStep
	fn   func(fd uintptr) bool
}

// use makes w write to conn through rc, conn's RawConn; without one
// (nil), the runtime's way.
func (w *rawWriter) use(conn *net.TCPConn, rc syscall.RawConn) {
	*w = rawWriter{conn: conn, rc: rc}
}

// writev writes b1, then b2, whole unless an error stops it, and returns
// how much of them went.
func (w *rawWriter) writev(b1, b2 []byte) (int, error) {
	if w.rc == nil {
		bufs := net.Buffers{b1, b2}
		n, err := bufs.WriteTo(w.conn)
		return int(n), err
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
			return false
		default:
			w.st.werr = err
			return true
		}
	}
	return true
}
func (c *Conn) writeUp(b []byte) error { return c.write(engine.Up, b) }

// dirWriter writes in one direction of the pair, counting bytes.
type dirWriter struct {
	c *Conn
	d engine.Direction
}

func (w dirWriter) Write(b []byte) (int, error) {
	if err := w.c.write(w.d, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *Conn) clientWriter() io.Writer { return dirWriter{c, engine.Down} }
func (c *Conn) upWriter() io.Writer     { return dirWriter{c, engine.Up} }

// WriteResponse writes a complete response (head and body) to the client,
// for answers the proxy has without an upstream (a cache hit, CONNECT).
func (c *Conn) WriteResponse(b []byte) error { return c.writeClient(b) }

// ClientBuffered returns and consumes what the client sent past the last
// request head that the proxy has read but not relayed.
func (c *Conn) ClientBuffered() []byte {
	n := c.client.Buffered()
	b, _ := c.client.Peek(n)
	out := append([]byte(nil), b...)
	c.client.Discard(n)
	return out
}

// WriteUp sends b to the current upstream in control mode.
func (c *Conn) WriteUp(b []byte) error { return c.writeUp(b) }

// ClientIP is the client's address without the port.
func (c *Conn) ClientIP() string {
	if c.clientIP == "" {
		c.clientIP = clientIP(c.S.Pair().Client.RemoteAddr())
	}
	return c.clientIP
}

func clientIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap().String()
	}
	addr := a.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// HostPort returns host with port def added when it has none.
func HostPort(host string, def int) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(def))
}

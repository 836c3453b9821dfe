// Reading request and response heads within limits, without consuming any byte of the body.

package httpcore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// Errors of readHead; ReadRequest turns them into statuses.
var (
	errHeadTooLarge   = errors.New("head too large")
	errTooManyHeaders = errors.New("too many header lines")
)

// readHead reads one message head (start line, header lines, empty line)
// from br and returns it. Empty lines before the start line are skipped, as
// RFC 9112 section 2.2 allows. br may have read ahead into the body; the
// body's bytes stay in br.
func readHead(br *bufio.Reader, lim Limits) ([]byte, error) {
	var head []byte
	lines := 0 // complete lines in head
	for {
		line, err := br.ReadSlice('\n')
		if lim.MaxHeaderBytes > 0 && len(head)+len(line) > lim.MaxHeaderBytes {
			return nil, errHeadTooLarge
		}
		head = append(head, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // a line longer than br's buffer: keep reading it
		}
		if err != nil {
			if err == io.EOF && len(head) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if !isEmptyLine(head[lineStart(head):]) {
			lines++
			if lim.MaxHeaders > 0 && lines-1 > lim.MaxHeaders {
				return nil, errTooManyHeaders
			}
			continue
		}
		if lines == 0 {
			head = head[:0]
			continue
		}
		return head, nil
	}
}

// lineStart is the offset of the last line in head, which ends with '\n'.
func lineStart(head []byte) int {
	return bytes.LastIndexByte(head[:len(head)-1], '\n') + 1
}

func isEmptyLine(line []byte) bool {
	return string(line) == "\r\n" || string(line) == "\n"
}

// errHeadLong says a head does not fit in its reader's buffer: readHead
// copies it out instead.
var errHeadLong = errors.New("head longer than the reader's buffer")

// peekHead returns the next message head among the bytes br holds, from
// the start line to the empty line, without consuming it (the caller
// discards it once parsed): no copy, and no deadline to set when the head
// came whole, as a small request's usually does. Empty lines before the
// start line are consumed (RFC 9112 section 2.2). When more must be read,
// more runs first, once (the caller bounds the wait); a head larger than
// br's buffer gives errHeadLong.
func peekHead(br *bufio.Reader, lim Limits, more func()) ([]byte, error) {
	waited := false
	for {
		buf, _ := br.Peek(br.Buffered())
		if skip := leadingEmptyLines(buf); skip > 0 {
			br.Discard(skip)
			continue
		}
		n, err := headLen(buf, lim)
		if n > 0 || err != nil {
			return buf[:n], err
		}
		if len(buf) == br.Size() {
			return nil, errHeadLong
		}
		if !waited && more != nil {
			more()
			waited = true
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF && br.Buffered() > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// leadingEmptyLines is the length of the complete empty lines buf starts with.
func leadingEmptyLines(buf []byte) int {
	n := 0
	for {
		switch {
		case len(buf) > n && buf[n] == '\n':
			n++
		case len(buf) > n+1 && buf[n] == '\r' && buf[n+1] == '\n':
			n += 2
		default:
			return n
		}
	}
}

// headLen is the length of the head buf starts with (a start line, which is
// not empty), through its empty line, or 0 if buf does not hold all of it
// yet; within lim, as readHead counts.
func headLen(buf []byte, lim Limits) (int, error) {
	lines := 0 // complete lines before the empty one
	for off := 0; ; {
		i := bytes.IndexByte(buf[off:], '\n')
		if i < 0 {
			if lim.MaxHeaderBytes > 0 && len(buf) > lim.MaxHeaderBytes {
				return 0, errHeadTooLarge
			}
			return 0, nil
		}
		end := off + i + 1
		if lim.MaxHeaderBytes > 0 && end > lim.MaxHeaderBytes {
			return 0, errHeadTooLarge
		}
		if isEmptyLine(buf[off:end]) {
			return end, nil
		}
		if lines++; lim.MaxHeaders > 0 && lines-1 > lim.MaxHeaders {
			return 0, errTooManyHeaders
		}
		off = end
	}
}

// nextHead is the next head from br, peeked in place when it fits in br's
// buffer (inBuf: the caller discards it after parsing), else copied out.
// more runs once before the first read that may block.
func nextHead(br *bufio.Reader, lim Limits, more func()) (head []byte, inBuf bool, err error) {
	called := false
	once := func() {
		if !called && more != nil {
			called = true
			more()
		}
	}
	head, err = peekHead(br, lim, once)
	if !errors.Is(err, errHeadLong) {
		return head, err == nil, err
	}
	once()
	head, err = readHead(br, lim)
	return head, false, err
}

// headParser gives net/http's parsers a complete head from memory, so that
// they never read the network; pooled, since a bufio.Reader's buffer per
// head was a measurable share of a small request's cost.
type headParser struct {
	src bytes.Reader
	br  *bufio.Reader
}

var headParsers = sync.Pool{New: func() any {
	hp := &headParser{}
	hp.br = bufio.NewReaderSize(&hp.src, 4<<10)
	return hp
}}

// parseRequest parses a complete request head. The request's Body is
// empty: the body's bytes are relayed by RoundTrip.
func parseRequest(head []byte) (*http.Request, error) {
	hp := headParsers.Get().(*headParser)
	hp.src.Reset(head)
	hp.br.Reset(&hp.src)
	req, err := http.ReadRequest(hp.br)
	headParsers.Put(hp)
	if req != nil {
		req.Body = http.NoBody
	}
	return req, err
}

// parseResponse parses a complete response head to req, its Body empty.
func parseResponse(head []byte, req *http.Request) (*http.Response, error) {
	hp := headParsers.Get().(*headParser)
	hp.src.Reset(head)
	hp.br.Reset(&hp.src)
	resp, err := http.ReadResponse(hp.br, req)
	headParsers.Put(hp)
	if resp != nil {
		resp.Body = http.NoBody
	}
	return resp, err
}

// ReadRequest reads the next request head from the client. It waits for the
// first byte up to the keep-alive timeout (ErrNoRequest when none comes or the
// client closes), then for the whole head up to the header timeout. A bad
// head gives a *StatusError: 400 malformed, 408 too slow, 431 too large or
// too many headers. The request's Body must not be read: the body's bytes are
// relayed by RoundTrip.
func (c *Conn) ReadRequest(ctx context.Context) (*http.Request, error) {
	// The first request must arrive whole within RequestTimeout of accept.
	var first time.Time
	if !c.served && c.Limits.RequestTimeout > 0 {
		first = c.S.Pair().Created.Add(c.Limits.RequestTimeout)
	}
	if c.client.Buffered() > 0 {
		if err := c.flush(); err != nil { // the next request came early
			return nil, errors.Join(ErrNoRequest, err)
		}
	} else {
		if c.served || c.clientIn.rc == nil {
			c.clientWait(ctx, first)
		} else {
			// A new connection's request usually came with the
			// handshake's last ACK: the wait is readied only if the
			// read finds nothing (waitFirst).
			c.firstCtx, c.firstBy, c.clientIn.wait = ctx, first, c.waitFirst
		}
		_, err := c.peekUnlessStopping()
		c.firstCtx, c.clientIn.wait = nil, nil
		if err != nil {
			return nil, errors.Join(ErrNoRequest, err)
		}
	}
	if err := c.flush(); err != nil { // the request came before the wait
		return nil, errors.Join(ErrNoRequest, err)
	}
	head, inBuf, err := nextHead(c.client, c.Limits, func() { c.setClientDeadline(ctx, c.Limits.HeaderTimeout, first) })
	c.clearClientDeadline()
	c.served = true
	c.requests++
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &StatusError{Status: http.StatusRequestTimeout, Reason: "request head not complete within the header timeout"}
	case errors.Is(err, errHeadTooLarge), errors.Is(err, errTooManyHeaders):
		return nil, &StatusError{Status: http.StatusRequestHeaderFieldsTooLarge, Reason: err.Error()}
	case err != nil:
		return nil, errors.Join(ErrNoRequest, err) // the client went away mid-head: nobody to answer
	}
	req, ok := fastRequest(head, c.mem)
	if !ok {
		if err := ValidateHead(head, true); err != nil {
			status := http.StatusBadRequest // a head the next hop could frame differently than we do
			if errors.Is(err, ErrUnsupportedCoding) {
				status = http.StatusNotImplemented
			}
			return nil, &StatusError{Status: status, Reason: err.Error()}
		}
		if req, err = parseRequest(head); err != nil {
			return nil, &StatusError{Status: http.StatusBadRequest, Reason: "malformed request", Err: err}
		}
		if err := checkTarget(req); err != nil {
			return nil, &StatusError{Status: http.StatusBadRequest, Reason: err.Error()}
		}
	}
	if inBuf {
		c.client.Discard(len(head))
	}
	if req.ProtoMajor != 1 {
		return nil, Errorf(http.StatusHTTPVersionNotSupported, "only HTTP/1.x is proxied")
	}
	// Hop-by-hop fields go first, before the proxy adds its own (a
	// client's "Connection: X-Forwarded-For" must not delete what the
	// proxy says). An upgrade the proxy can relay is remembered.
	c.upgrade = upgradeRequested(req)
	StripHopByHop(req.Header)
	c.cur, c.curStart = req, time.Now()
	if err := CheckBodySize(req.ContentLength, c.Limits.MaxBodyBytes); err != nil {
		return nil, err
	}
	return req, nil
}

// clientWait readies a wait for the client's next request: the
// deadline (the keep-alive bound, and request_timeout's for the first
// request, by first) and the watch for a graceful shutdown.
func (c *Conn) clientWait(ctx context.Context, first time.Time) {
	if first.IsZero() && !c.clientDeadline {
		c.clientDL.refresh(c.clientIdle(), &c.stopped)
	} else {
		c.setClientDeadline(ctx, c.clientIdle(), first)
	}
	c.watchOnce()
}

// waitFirst is clientWait for the first request, run by the client's raw
// read once it found nothing and is about to wait (idleReader.wait): a
// client that sent its request with the handshake costs no deadline (two
// timer updates) and no goroutine (watchStopping).
func (c *Conn) waitFirst() { c.clientWait(c.firstCtx, c.firstBy) }

// setClientDeadline bounds the next client read by d from now (0: no bound)
// and by limit (zero: none), unless ctx is done, in which case the read
// must fail at once.
func (c *Conn) setClientDeadline(ctx context.Context, d time.Duration, limit time.Time) {
	client := c.S.Pair().Client
	deadline := limit
	if d > 0 && (deadline.IsZero() || time.Now().Add(d).Before(deadline)) {
		deadline = time.Now().Add(d)
	}
	if !deadline.IsZero() || c.clientDeadline {
		client.SetReadDeadline(deadline)
		c.clientDL.forget()
	}
	c.clientDeadline = !deadline.IsZero()
	if ctx.Err() != nil {
		client.SetReadDeadline(past) // interrupt may have run before the line above
		c.clientDeadline = true
		c.clientDL.forget()
	}
}

// clearClientDeadline lifts the client's read deadline, if one is set.
// Only ReadRequest sets one and this is its last step, so a head read
// without waiting costs no deadline at all.
func (c *Conn) clearClientDeadline() {
	if c.clientDeadline {
		// The write deadline of clientDL may stand: both go.
		c.S.Pair().Client.SetDeadline(time.Time{})
		c.clientDeadline = false
	}
}

// errStopping ends a keep-alive connection waiting for its next request
// when a graceful shutdown begins.
var errStopping = errors.New("shutting down")

// peekUnlessStopping waits for the first byte of the next request, giving up
// when a graceful shutdown begins: an idle keep-alive connection is closed
// then rather than holding the shutdown for its whole grace period.
func (c *Conn) peekUnlessStopping() ([]byte, error) {
	w := &c.stop
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return nil, errStopping
	}
	w.waiting = true
	w.mu.Unlock()
	b, err := c.client.Peek(1)
	w.mu.Lock()
	w.waiting = false
	if w.stopping && err == nil {
		// The request came as the shutdown began: it is served, without
		// the deadline that was to interrupt the wait.
		c.S.Pair().Client.SetDeadline(time.Time{})
		c.clientDL.forget()
	}
	w.mu.Unlock()
	return b, err
}

// watchOnce starts watchStopping unless it runs already.
func (c *Conn) watchOnce() {
	w := &c.stop
	w.mu.Lock()
	if !w.watched {
		w.watched = true
		go c.watchStopping()
	}
	w.mu.Unlock()
}

// stopWatch is what a connection's watchStopping and its reader share.
type stopWatch struct {
	mu       sync.Mutex
	watched  bool // watchStopping runs
	waiting  bool // the reader waits for a request's first byte
	stopping bool // a graceful shutdown began
	done     chan struct{}
}

// watchStopping runs for the life of a client connection (one goroutine
// per connection, not per request: each start wakes the scheduler): when a
// graceful shutdown begins it interrupts the wait for the next request, or
// has the next wait give up at once.
func (c *Conn) watchStopping() {
	select {
	case <-c.S.Stopping():
	case <-c.stop.done:
		return
	}
	c.stop.mu.Lock()
	c.stop.stopping = true
	if c.stop.waiting {
		c.S.Pair().Client.SetReadDeadline(past)
	}
	c.stop.mu.Unlock()
}

// past is a deadline that interrupts a blocked read at once.
var past = time.Unix(1, 0)

// readResponse reads the response head to req from the upstream, relaying
// interim 1xx responses (100 Continue, 103 Early Hints) to the client.
func (c *Conn) readResponse(ctx context.Context, req *http.Request) (*http.Response, error) {
	for {
		head, inBuf, err := nextHead(c.up.r, ResponseLimits, nil)
		if err != nil {
			c.upFailed = true
			return nil, err
		}
		resp, ok := fastResponse(head, req, c.mem)
		if !ok {
			if err := ValidateHead(head, false); err != nil {
				c.upFailed = true
				return nil, fmt.Errorf("upstream response: %w", err)
			}
			if resp, err = parseResponse(head, req); err != nil {
				c.upFailed = true
				return nil, err
			}
		}
		// Both lengths: net/http takes the chunked framing and drops
		// Content-Length, but a server that sent both may frame its
		// next response by either (responseRead).
		c.up.doubtful = !ok && len(resp.TransferEncoding) > 0 && hasField(head, "Content-Length")
		interim := resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols
		if interim {
			// head may lie in c.up.r's buffer, which only the next read
			// reuses: relayed before it is discarded.
			err = c.writeClient(head)
		}
		if inBuf {
			c.up.r.Discard(len(head))
		}
		switch {
		case err != nil:
			return nil, err
		case resp.StatusCode == http.StatusSwitchingProtocols && !switchAccepted(c.upgrade, resp):
			c.upFailed = true
			return nil, errors.New("upstream switched to a protocol the request did not ask for")
		case !interim:
			return resp, nil
		}
	}
}

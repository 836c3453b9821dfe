// Reading request and response heads within limits, without consuming any byte of the body.

package httpcore

import (
	"github.com/splicer/splicer/engine"

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

// ReadRequest reads the next request head from the client. It waits for the
// first byte up to the idle timeout (ErrNoRequest when none comes or the
// client closes), then for the whole head up to the header timeout. A bad
// head gives a *StatusError: 400 malformed, 408 too slow, 431 too large or
// too many headers. The request's Body must not be read: the body's bytes are
// relayed by RoundTrip.
func (c *Conn) ReadRequest(ctx context.Context) (*http.Request, error) {
	client := c.S.Pair().Client
	// The first request must arrive whole within RequestTimeout of accept.
	var first time.Time
	if !c.served && c.Limits.RequestTimeout > 0 {
		first = c.S.Pair().Created.Add(c.Limits.RequestTimeout)
	}
	if c.client.Buffered() == 0 {
		c.setClientDeadline(ctx, c.Idle, first)
		if _, err := c.peekUnlessStopping(); err != nil {
			return nil, errors.Join(ErrNoRequest, err)
		}
	}
	c.setClientDeadline(ctx, c.Limits.HeaderTimeout, first)
	head, err := readHead(c.client, c.Limits)
	client.SetReadDeadline(time.Time{})
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
	if err := ValidateHead(head, true); err != nil {
		// A head the next hop could frame differently than we do.
		return nil, &StatusError{Status: http.StatusBadRequest, Reason: err.Error()}
	}
	req, err := http.ReadRequest(headReader(head))
	if err != nil {
		return nil, &StatusError{Status: http.StatusBadRequest, Reason: "malformed request", Err: err}
	}
	if req.ProtoMajor != 1 {
		return nil, Errorf(http.StatusHTTPVersionNotSupported, "only HTTP/1.x is proxied")
	}
	// Hop-by-hop fields go first, before the proxy adds its own (a
	// client's "Connection: X-Forwarded-For" must not delete what the
	// proxy says). An upgrade the proxy can relay is remembered.
	c.upgrade = upgradeRequested(req)
	StripHopByHop(req.Header)
	c.cur, c.curStart, c.curDown = req, time.Now(), c.S.Pair().Bytes(engine.Down)
	return req, nil
}

// setClientDeadline bounds the next client read by d from now (0: no bound)
// and by limit (zero: none), unless ctx is done, in which case the read
// must fail at once.
func (c *Conn) setClientDeadline(ctx context.Context, d time.Duration, limit time.Time) {
	client := c.S.Pair().Client
	deadline := limit
	if d > 0 && (deadline.IsZero() || time.Now().Add(d).Before(deadline)) {
		deadline = time.Now().Add(d)
	}
	client.SetReadDeadline(deadline)
	if ctx.Err() != nil {
		client.SetReadDeadline(past) // interrupt may have run before the line above
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
	if !w.watched {
		w.watched = true
		go c.watchStopping()
	}
	w.mu.Unlock()
	b, err := c.client.Peek(1)
	w.mu.Lock()
	w.waiting = false
	if w.stopping && err == nil {
		// The request came as the shutdown began: it is served, without
		// the deadline that was to interrupt the wait.
		c.S.Pair().Client.SetReadDeadline(time.Time{})
	}
	w.mu.Unlock()
	return b, err
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
		head, err := readHead(c.up.r, responseLimits)
		if err != nil {
			return nil, err
		}
		if err := ValidateHead(head, false); err != nil {
			return nil, fmt.Errorf("upstream response: %w", err)
		}
		resp, err := http.ReadResponse(headReader(head), req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if switchAccepted(c.upgrade, resp) {
				return resp, nil
			}
			return nil, errors.New("upstream switched to a protocol the request did not ask for")
		}
		if resp.StatusCode >= 200 {
			return resp, nil
		}
		if err := c.writeClient(head); err != nil {
			return nil, err
		}
	}
}

// headReader wraps a complete head for net/http's parsers with a buffer
// just its size: bufio's default 4 KiB, twice per request, was a
// measurable share of the per-request cost for small objects.
func headReader(head []byte) *bufio.Reader {
	return bufio.NewReaderSize(bytes.NewReader(head), len(head))
}

// The upstream side of an exchange: the connection dialled and the PROXY header sent, the request sent with its body in the background, the response head read within response_timeout, and whose fault a failure was.

package filter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/httpcore"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// roundTrip sends req to the upstream, its body in the background (done
// reports how that ended), and reads the final response head. A request
// without a body that finds a reused upstream connection closed (the
// upstream's keep-alive timeout ran out while the client was idle) is sent
// once more on a new connection; one with a body, which cannot be sent
// twice, looks first and takes a new connection if the kept one is closed.
func (c *conn) roundTrip(ctx context.Context, req *message) (resp *message, done chan error, err error) {
	for attempt := 0; ; attempt++ {
		if c.up != nil && req.body.kind != noBody && !c.keptUsable() {
			c.closeUpstream()
		}
		reused := c.up != nil
		if err := c.ensureUpstream(ctx); err != nil {
			return nil, nil, err
		}
		if err := c.toUpstream(req.head); err != nil && !(reused && req.body.kind == noBody) {
			return nil, nil, err
		}
		done = make(chan error, 1)
		upw, upIn := &httpcore.WatchedWriter{W: c.upWriter()}, c.upIn
		if req.body.kind == noBody {
			upIn.setIdle(c.responseIdle())
		} else {
			// The body comes at the client's pace, which body_timeout
			// bounds; the wait for the response begins once it is sent.
			upIn.setIdle(c.p.IdleTimeout)
		}
		go func() {
			idle := c.bodyIdle()
			err := copyBody(upw, c.cr, req.body, c.p.Limits.MaxBodyBytes)
			c.clientIn.setIdle(c.p.IdleTimeout)
			switch {
			case err == nil:
				if req.body.kind != noBody {
					upIn.waitResponse(c.responseIdle()) // sent: the response's wait begins
				}
			case upw.Err != nil:
			case errors.Is(err, os.ErrDeadlineExceeded) && c.clientIn.stop.Load():
				// The filter's own interruption (waitBody).
			case errors.Is(err, os.ErrDeadlineExceeded):
				// The client sent nothing of its body for idle: the
				// upstream, waiting for the rest, would never answer.
				upIn.interrupt()
				err = &clientBodyError{err: err, stalled: idle}
			default:
				// The client's body was malformed or ended early.
				upIn.interrupt()
				err = &clientBodyError{err: err}
			}
			done <- err
		}()
		resp, err = c.readResponse(req)
		if err == nil || !reused || req.body.kind != noBody || attempt > 0 || !errors.Is(err, errNoResponse) {
			return resp, done, err
		}
		<-done // no body: already finished
		c.s.Log().Debug("reused upstream connection closed, retrying on a new one", "err", err)
		c.closeUpstream()
	}
}

// bodyIdle bounds the client's reads as httpcore.BodyIdle says, for the
// request body the caller copies next, and returns the bound. The caller
// puts IdleTimeout back.
func (c *conn) bodyIdle() time.Duration {
	idle := httpcore.BodyIdle(c.p.IdleTimeout, c.p.Limits.BodyTimeout)
	c.clientIn.setIdle(idle)
	return idle
}

// responseIdle bounds each wait for the upstream once a request is sent,
// as httpcore.ResponseIdle says.
func (c *conn) responseIdle() time.Duration {
	return httpcore.ResponseIdle(c.p.IdleTimeout, c.p.Limits.ResponseTimeout)
}

// clientBodyError: the client's request body was malformed or ended early,
// or stalled (nothing of it for the stalled duration): the client's fault,
// 400 or 408, where an upstream's failure is a 502.
type clientBodyError struct {
	err     error
	stalled time.Duration
}

// refusal is the status and message the client gets for the body.
func (e *clientBodyError) refusal() (int, string) {
	if e.stalled > 0 {
		return http.StatusRequestTimeout, httpcore.StalledBody(e.stalled)
	}
	if errors.Is(e.err, httpcore.ErrBodyTooLarge) {
		return http.StatusRequestEntityTooLarge, "chunked request body larger than http.max_body_bytes"
	}
	return http.StatusBadRequest, "malformed or unfinished request body"
}

func (e *clientBodyError) Error() string { return "request body: " + e.err.Error() }

func (e *clientBodyError) Unwrap() error { return e.err }

// BadInput marks the pair's close reason bad_request.
func (e *clientBodyError) BadInput() bool { return true }

// timedOut reports whether err is a read of the upstream that outlasted
// its deadline, not the filter's own interruption (waitBody, a failed
// body, shutdown).
func (c *conn) timedOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && !c.upIn.stop.Load()
}

// responseTimedOut is the error of a response head that did not come in
// time (a 504; close reason upstream_timeout).
func (c *conn) responseTimedOut(err error) error {
	return fmt.Errorf("%w: %w", proxy.ErrResponseTimeout, err)
}

// errNoResponse means the upstream closed without a byte of response.
var errNoResponse = errors.New("upstream closed without responding")

// readResponse reads response heads, forwarding interim (1xx) ones, until
// the final response.
func (c *conn) readResponse(req *message) (*message, error) {
	for first := true; ; first = false {
		if _, err := c.upr.Peek(1); err != nil && first {
			if c.timedOut(err) {
				return nil, c.responseTimedOut(err)
			}
			return nil, fmt.Errorf("%w: %w", errNoResponse, err)
		}
		resp, err := readMessage(c.upr, false, req.method, httpcore.ResponseLimits)
		if err != nil && c.timedOut(err) {
			return nil, c.responseTimedOut(err)
		}
		if err != nil {
			return nil, fmt.Errorf("upstream response: %w", err)
		}
		if resp.status >= 200 || resp.status == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if err := c.toClient(resp.head); err != nil {
			return nil, err
		}
	}
}

// ensureUpstream dials the next upstream (trying the others in turn) if
// there is none, and sends the PROXY protocol header.
func (c *conn) ensureUpstream(ctx context.Context) error {
	if c.up != nil {
		return nil
	}
	up, srv, err := c.p.Upstreams.Dial(ctx, c.s, proxy.AtClose)
	if err != nil {
		return err
	}
	if err := proxyproto.Send(c.p.ProxyProtocol, c.s.Pair(), up); err != nil {
		up.Close()
		srv.Release()
		return err
	}
	c.up, c.srv, c.upIn, c.answered = up, srv, &deadlineReader{c: up}, 0
	c.upr = bufio.NewReader(c.upIn)
	return nil
}

// keptUsable reports whether the kept upstream connection can take a
// request: the server has neither closed it nor sent anything unasked.
func (c *conn) keptUsable() bool {
	return c.upr.Buffered() == 0 && httpcore.Reusable(c.up)
}

// closeUpstream closes the current upstream, if any.
func (c *conn) closeUpstream() {
	if c.up != nil {
		c.up.Close()
		c.srv.Release()
		c.up, c.srv, c.upIn, c.upr = nil, nil, nil, nil
	}
}

func (c *conn) toUpstream(b []byte) error {
	_, err := c.upWriter().Write(b)
	return err
}

func (c *conn) toClient(b []byte) error {
	_, err := c.clientWriter().Write(b)
	return err
}

// upWriter and clientWriter count what they forward in the pair's counters.
func (c *conn) upWriter() io.Writer {
	return &countingWriter{w: c.up, pair: c.s.Pair(), dir: engine.Up, idle: c.p.IdleTimeout}
}

// clientWriter's writes (a response) wait for a client that takes
// nothing no longer than responseIdle: as long as for an upstream that
// sends nothing.
func (c *conn) clientWriter() io.Writer {
	return &countingWriter{w: c.client, pair: c.s.Pair(), dir: engine.Down, idle: c.responseIdle()}
}

// waitBody returns how the request body copy ended, cutting short a copy
// still waiting for the client (the exchange is over either way).
func (c *conn) waitBody(done chan error) error {
	select {
	case err := <-done:
		return err
	default:
	}
	c.clientIn.stop.Store(true)
	c.client.SetReadDeadline(time.Now())
	err := <-done
	c.clientIn.stop.Store(false)
	if err == nil {
		return nil
	}
	return fmt.Errorf("request body cut short: %w", err)
}

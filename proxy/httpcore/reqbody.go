// Relaying a request body upstream, and the client's faults in it: a stalled body (408, http.body_timeout) or a malformed or short one (400).

package httpcore

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
)

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
	defer c.bodyPaced()()
	defer c.bodyUp()()
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
		err := relayChunked(up, c.client, c.Limits.MaxBodyBytes)
		if up.Err == nil && c.bodyStalled(err) {
			return c.bodyTimedOut(err)
		}
		if errors.Is(err, ErrBodyTooLarge) {
			return bodyTooLarge("chunked request body", c.Limits.MaxBodyBytes)
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
	if bt == c.clientIdle() {
		return func() {}
	}
	c.clientIn.idle = bt
	c.clientDL.forget() // the standing deadline may be further off
	return func() {
		c.clientIn.idle = c.clientIdle() // its next refresh lifts bt's deadline where that is 0
	}
}

// bodyPace is the bound on a request body's whole time that
// Limits.BodyMinRate sets: the body must be done by its grace (its idle
// bound, from its start) and 1/rate second more for each byte that came.
// Each wait's idle bound alone let a client that sent a byte just within
// it hold the connection, and the upstream one, for as long as it liked.
type bodyPace struct {
	until time.Time // the start and the grace
	rate  int64     // bytes per second
	n0    int64     // the reader's count (idleReader.n) at the start
}

// deadline is when the body must be done, the client's reader having
// read n bytes (its count, idleReader.n); zero past any bound that
// matters.
func (p *bodyPace) deadline(n int64) time.Time {
	got := max(n-p.n0, 0)
	secs := got / p.rate
	if secs > 1<<32 {
		return time.Time{}
	}
	return p.until.Add(time.Duration(secs)*time.Second + time.Duration(got%p.rate)*time.Second/time.Duration(p.rate))
}

// errBodySlow: a request body came slower than Limits.BodyMinRate.
var errBodySlow = errors.New("request body slower than its minimum rate")

// bodyPaced bounds the request body's whole time by Limits.BodyMinRate
// (bodyPace), if set, until the returned function runs. The bytes the
// head reader holds already count as come.
func (c *Conn) bodyPaced() (restore func()) {
	if c.Limits.BodyMinRate <= 0 {
		return func() {}
	}
	c.pace = bodyPace{until: time.Now().Add(c.clientIn.idle), rate: c.Limits.BodyMinRate,
		n0: c.clientIn.n - int64(c.client.Buffered())}
	c.clientIn.pace = &c.pace
	return func() {
		c.clientIn.pace = nil
		c.clientDL.forget() // the pace's deadline may be nearer than idle's
	}
}

// bodySlow reports whether the request body fell behind its pace.
func (c *Conn) bodySlow() bool {
	p := c.clientIn.pace
	if p == nil {
		return false
	}
	dl := p.deadline(c.clientIn.n)
	return !dl.IsZero() && !time.Now().Before(dl)
}

// bodyStalled reports whether err ended a request body because the
// client sent nothing of it for its idle bound (bodyIdle), or sent it
// too slowly (bodyPaced): the client's deadline passed, or the engine
// splicing the body found nothing moving (the other way is held), or
// handed it back past its pace, and the pair was not interrupted.
func (c *Conn) bodyStalled(err error) bool {
	if err == nil || c.stopped.Load() {
		return false
	}
	if errors.Is(err, errBodySlow) {
		return true
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
	if errors.Is(err, errBodySlow) || c.bodySlow() {
		return &StatusError{Status: http.StatusRequestTimeout, Err: err,
			Reason: "request body slower than http.body_min_rate (" + strconv.FormatInt(c.Limits.BodyMinRate, 10) + " bytes/s)"}
	}
	return &StatusError{Status: http.StatusRequestTimeout, Reason: StalledBody(c.clientIn.idle), Err: err}
}

// BodyIdle is the bound on each wait for more of a request body, in every
// HTTP kind: body (http.body_timeout) where it is shorter than idle
// (idle_timeout; 0 is never), else idle.
func BodyIdle(idle, body time.Duration) time.Duration { return shorter(idle, body) }

// bodyUp keeps the response timeout off the upstream's deadline while a
// request body goes to it, until the returned function runs: the body
// comes at the client's pace, which body_timeout bounds, and the wait
// for the response begins once it is sent. The upstream's deadline then
// stays Idle's, so bodyStalled still tells which side stalled.
func (c *Conn) bodyUp() (restore func()) {
	up := c.up
	c.sendingBody = true // Idle 0: the next refresh lifts the deadline
	return func() {
		c.sendingBody = false
		up.dl.forget() // further off than upIdle: the next refresh sets it
	}
}

// StalledBody is the reason of the 408 for a request body of which
// nothing came for idle.
func StalledBody(idle time.Duration) string {
	return "request body stalled: nothing of it for " + idle.String()
}

// bodyTooLarge is the 413 for a request body larger than
// Limits.MaxBodyBytes: what says so, then the bound.
func bodyTooLarge(what string, max int64) *StatusError {
	return &StatusError{Status: http.StatusRequestEntityTooLarge,
		Reason: what + " larger than http.max_body_bytes (" + strconv.FormatInt(max, 10) + " bytes)"}
}

// CheckBodySize is the 413 for a request whose body's length (its
// Content-Length; -1: unknown) is larger than max (0: no bound), answered
// before any upstream hears of it; nil for any other request. The filter
// asks it too.
func CheckBodySize(length, max int64) *StatusError {
	if max <= 0 || length <= max {
		return nil
	}
	return bodyTooLarge("request body of "+strconv.FormatInt(length, 10)+" bytes", max)
}

// badRequestBody is the 400 for a request body the client got wrong: its
// fault, not the upstream's (a 502 would say the server failed).
func badRequestBody(reason string, err error) *StatusError {
	return &StatusError{Status: http.StatusBadRequest, Reason: reason, Err: err}
}

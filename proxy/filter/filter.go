// Package filter is the filtering proxy (class 4 in the papers): it reads every HTTP/1.1 request and response in both directions, so it never splices.
//
// For each request on a (keep-alive) client connection the filter reads the
// head, answers 403 and closes if the path matches a blocked pattern,
// otherwise forwards the head and streams the body (Content-Length or
// chunked) to the upstream, reads the response head and, if its media type
// is blocked, closes the upstream and answers 403 instead; an allowed
// response is streamed back. Heads are forwarded byte for byte, bodies are
// streamed without being held in memory.
//
// Since both directions are inspected all the time there is never a moment
// when only forwarding is left: the pair stays in control mode and /flows
// shows engine copy with the note "filter inspects both directions".
// A 101 Switching Protocols response leaves nothing to inspect: the pair is
// then forwarded in control mode until it ends.
//
// Bad input gets a response and a close: 400 for a malformed head, a
// request with both Content-Length and Transfer-Encoding, or a request body
// that is malformed or ends early, 431 for a head
// over the size or header-count limit, 408 when the head does not arrive
// within the header timeout, 502 when no upstream answers.
package filter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/httpcore"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// NoSpliceReason is what /flows shows for every filter pair.
const NoSpliceReason = "filter inspects both directions"

// Defaults for the limits left at zero.
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxHeaders     = 100
)

// Proxy filters HTTP/1.1 between clients and its upstreams.
type Proxy struct {
	// Upstreams are host:port addresses taken in turn for each client
	// connection (and again after a blocked response closed the upstream).
	Upstreams []string
	// BlockPaths are path.Match patterns matched against the cleaned
	// request path, or against its last element for a pattern without a
	// slash; a match is answered 403 and the connection closed.
	BlockPaths []string
	// BlockContentTypes are path.Match patterns matched against the
	// response's media type (lower case, without parameters); a match is
	// replaced by a 403.
	BlockContentTypes []string
	// IdleTimeout bounds the wait for the next request and every read of a
	// body or response; 0 waits forever.
	IdleTimeout time.Duration
	// HeaderTimeout bounds reading a request head once its first byte
	// arrived (slowloris); 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// PathIgnoreCase and PathStripParams loosen path matching for origins
	// that ignore case or ";params" (see config.Filter).
	PathIgnoreCase, PathStripParams bool
	// RequestTimeout bounds the first request's head from accept, so
	// silent connections cannot hold the listener; 0 means none.
	RequestTimeout time.Duration
	// BodyTimeout bounds each wait for more of a request body (408
	// after) where it is shorter than IdleTimeout; 0 means none.
	BodyTimeout time.Duration
	// ResponseTimeout bounds each wait for the upstream once a request is
	// sent (504 before the response head) where it is shorter than
	// IdleTimeout; 0 means none.
	ResponseTimeout time.Duration
	// KeepaliveTimeout bounds the wait for the next request on a kept
	// connection where it is shorter than IdleTimeout; 0 means none.
	KeepaliveTimeout time.Duration
	// MaxHeaderBytes and MaxHeaders bound a head; 0 means the defaults.
	MaxHeaderBytes, MaxHeaders int
	// ProxyProtocol ("v1", "v2" or empty) sends a PROXY protocol header to
	// each upstream before any client byte.
	ProxyProtocol string

	next atomic.Uint64
}

// FromConfig builds the proxy of a filter listener.
func FromConfig(lc config.Listener) (proxy.Proxy, error) {
	p := &Proxy{Upstreams: lc.Upstream, IdleTimeout: lc.IdleTimeout.Std(), ProxyProtocol: lc.ProxyProtocol}
	if lc.Filter != nil {
		p.BlockPaths, p.BlockContentTypes = lc.Filter.BlockPaths, lc.Filter.BlockContentTypes
		p.PathIgnoreCase, p.PathStripParams = lc.Filter.PathIgnoreCase, lc.Filter.PathStripParams
	}
	if h := lc.HTTP; h != nil {
		p.HeaderTimeout, p.MaxHeaderBytes, p.MaxHeaders = h.HeaderTimeout.Std(), int(h.MaxHeaderBytes), h.MaxHeaders
	}
	p.RequestTimeout = lc.HTTP.WithDefaults().RequestTimeout.Std()
	p.BodyTimeout = lc.HTTP.WithDefaults().BodyTimeout.Std()
	p.ResponseTimeout = lc.HTTP.WithDefaults().ResponseTimeout.Std()
	p.KeepaliveTimeout = lc.HTTP.WithDefaults().KeepaliveTimeout.Std()
	return p, nil
}

// Serve implements proxy.Proxy: one request and response after another
// until either side closes or asks to.
func (p *Proxy) Serve(ctx context.Context, s proxy.Session) error {
	s.NoSplice(NoSpliceReason)
	c := &conn{p: p, s: s, client: s.Pair().Client}
	c.clientIn.c = c.client
	c.clientIn.setIdle(p.IdleTimeout)
	c.cr = bufio.NewReader(&c.clientIn)
	defer c.closeUpstream()
	// The filter blocks in reads, not in an engine: on shutdown, closing
	// the client ends whatever it waits for.
	stop := context.AfterFunc(ctx, func() { c.client.Close() })
	defer stop()
	for {
		done, err := c.exchange(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if done || err != nil {
			return err
		}
	}
}

// upgradeMatches reports whether a 101 switches to the protocol req asked for.
func upgradeMatches(req, resp *message) bool {
	return req.upgrade != "" && strings.EqualFold(strings.TrimSpace(resp.header.Get("Upgrade")), req.upgrade)
}

// conn is one client connection's state.
type conn struct {
	p        *Proxy
	s        proxy.Session
	client   *net.TCPConn
	clientIn deadlineReader
	cr       *bufio.Reader
	up       *net.TCPConn    // nil until dialled and after a blocked response
	served   bool            // a request head was read: RequestTimeout is over
	upIn     *deadlineReader // what upr reads
	upr      *bufio.Reader
}

// exchange relays one request and its response. done means the connection
// is to be closed without error.
func (c *conn) exchange(ctx context.Context) (done bool, err error) {
	req, err := c.readRequest()
	if err != nil {
		if errors.Is(err, errClientGone) {
			return true, nil
		}
		var he *httpError
		if errors.As(err, &he) {
			c.refuse(he.status, he.msg)
		}
		return true, err
	}
	if pat, blocked := blockedPath(c.p.BlockPaths, req.path, c.p.PathIgnoreCase, c.p.PathStripParams); blocked {
		c.s.Log().Info("filter blocked request", "path", req.path, "pattern", pat)
		c.refuse(http.StatusForbidden, "blocked by filter: path matches "+pat)
		return true, nil
	}
	resp, bodyDone, err := c.roundTrip(ctx, req)
	if err != nil {
		c.closeUpstream()
		if bodyDone != nil {
			err = errors.Join(err, c.waitBody(bodyDone))
		}
		if bad := (*clientBodyError)(nil); errors.As(err, &bad) {
			c.refuse(bad.refusal())
			return true, err
		}
		if errors.Is(err, proxy.ErrResponseTimeout) {
			c.refuse(http.StatusGatewayTimeout, "no response from the upstream in time")
			return true, err
		}
		c.refuse(http.StatusBadGateway, "no valid response from the upstream")
		return true, err
	}
	if pat, blocked := c.blockedType(resp); blocked {
		return c.blockResponse(resp, pat, bodyDone)
	}
	if resp.status == http.StatusSwitchingProtocols && !upgradeMatches(req, resp) {
		// Only the switch the client asked for, and that the filter let
		// through, is tunnelled: anything else would carry a protocol past
		// the filter that it never agreed to.
		c.closeUpstream()
		c.refuse(http.StatusBadGateway, "upstream switched to a protocol the request did not ask for")
		return true, errors.Join(errors.New("unrequested 101 Switching Protocols"), c.waitBody(bodyDone))
	}
	if err := c.toClient(resp.head); err != nil {
		return true, err
	}
	if resp.status == http.StatusSwitchingProtocols {
		return true, c.tunnel(ctx, bodyDone)
	}
	cw := &httpcore.WatchedWriter{W: c.clientWriter()}
	if err := copyBody(cw, c.upr, resp.body); err != nil {
		switch {
		case cw.Err != nil && errors.Is(cw.Err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("%w: %w", proxy.ErrClientTimeout, err) // the client stopped taking the body
		case cw.Err == nil && c.timedOut(err):
			err = c.responseTimedOut(err) // the upstream stopped sending the body
		}
		c.closeUpstream()
		return true, errors.Join(err, c.waitBody(bodyDone))
	}
	if err := <-bodyDone; err != nil {
		return true, err
	}
	return req.close || resp.close || resp.body.kind == untilEOF, nil
}

// roundTrip sends req to the upstream, its body in the background (done
// reports how that ended), and reads the final response head. A request
// without a body that finds a reused upstream connection closed (the
// upstream's keep-alive timeout ran out while the client was idle) is sent
// once more on a new connection.
func (c *conn) roundTrip(ctx context.Context, req *message) (resp *message, done chan error, err error) {
	for attempt := 0; ; attempt++ {
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
			err := copyBody(upw, c.cr, req.body)
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
	idle := httpcore.BodyIdle(c.p.IdleTimeout, c.p.BodyTimeout)
	c.clientIn.setIdle(idle)
	return idle
}

// responseIdle bounds each wait for the upstream once a request is sent,
// as httpcore.ResponseIdle says.
func (c *conn) responseIdle() time.Duration {
	return httpcore.ResponseIdle(c.p.IdleTimeout, c.p.ResponseTimeout)
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
		resp, err := readMessage(c.upr, false, req.method, c.p.maxHeaderBytes(), c.p.maxHeaders())
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

// blockedType returns the pattern that blocks resp's media type, if any.
func (c *conn) blockedType(resp *message) (string, bool) {
	if len(c.p.BlockContentTypes) == 0 {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(resp.header.Get("Content-Type"))
	if err != nil {
		return "", false
	}
	return matchAny(c.p.BlockContentTypes, strings.ToLower(mt))
}

// blockResponse drops a response the filter blocks: the upstream is closed
// (its body is never read) and the client gets a 403. The client
// connection stays usable only if its request body was complete.
func (c *conn) blockResponse(resp *message, pat string, bodyDone chan error) (bool, error) {
	c.s.Log().Info("filter blocked response", "content_type", resp.header.Get("Content-Type"), "pattern", pat)
	c.closeUpstream()
	bodyErr := c.waitBody(bodyDone)
	msg := "blocked by filter: content type matches " + pat
	if bodyErr != nil {
		c.refuse(http.StatusForbidden, msg)
		return true, nil
	}
	if _, err := io.WriteString(c.client, errorResponse(http.StatusForbidden, msg, false)); err != nil {
		return true, err
	}
	return false, nil
}

// tunnel forwards an upgraded connection (101) in control mode until it ends.
func (c *conn) tunnel(ctx context.Context, bodyDone chan error) error {
	if err := <-bodyDone; err != nil {
		return err
	}
	if err := c.flush(c.cr, c.upWriter()); err != nil {
		return err
	}
	if err := c.flush(c.upr, c.clientWriter()); err != nil {
		return err
	}
	c.client.SetReadDeadline(time.Time{})
	c.up.SetReadDeadline(time.Time{})
	r, err := c.s.Forward(ctx, engine.Both(c.p.IdleTimeout))
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// flush writes out what r has buffered.
func (c *conn) flush(r *bufio.Reader, w io.Writer) error {
	if n := r.Buffered(); n > 0 {
		b, _ := r.Peek(n)
		_, err := w.Write(b)
		return err
	}
	return nil
}

// ensureUpstream dials the next upstream (trying the others in turn) if
// there is none, and sends the PROXY protocol header.
func (c *conn) ensureUpstream(ctx context.Context) error {
	if c.up != nil {
		return nil
	}
	if len(c.p.Upstreams) == 0 {
		return errors.New("filter proxy has no upstream")
	}
	start := c.p.next.Add(1) - 1
	var errs []error
	for i := range c.p.Upstreams {
		addr := c.p.Upstreams[(start+uint64(i))%uint64(len(c.p.Upstreams))]
		up, err := c.s.Dial(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			c.s.Log().Warn("upstream connect failed", "upstream", addr, "err", err)
			continue
		}
		if err := proxyproto.Send(c.p.ProxyProtocol, c.client, up); err != nil {
			up.Close()
			return err
		}
		c.up, c.upIn = up, &deadlineReader{c: up}
		c.upr = bufio.NewReader(c.upIn)
		return nil
	}
	return errors.Join(errs...)
}

// closeUpstream closes the current upstream, if any.
func (c *conn) closeUpstream() {
	if c.up != nil {
		c.up.Close()
		c.up, c.upIn, c.upr = nil, nil, nil
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

// refuse answers the client with an error response and closes its side,
// reading what it still sends for a moment: closing with unread data would
// reset the connection, and the reset can destroy the response before the
// client reads it.
func (c *conn) refuse(status int, msg string) {
	c.client.SetWriteDeadline(time.Now().Add(time.Second))
	io.WriteString(c.client, errorResponse(status, msg, true))
	c.client.CloseWrite()
	c.client.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, c.client, 1<<20)
}

// errorResponse is a small text/plain response.
func errorResponse(status int, msg string, close bool) string {
	body := msg + "\n"
	conn := ""
	if close {
		conn = "Connection: close\r\n"
	}
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n%s\r\n%s",
		status, http.StatusText(status), len(body), conn, body)
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

// blockedPath returns the pattern that blocks the request path p. The path
// is cleaned first, so /x/../admin and //admin are /admin; a pattern
// without a slash matches the last element, as in .gitignore (*.exe).
func blockedPath(patterns []string, p string, ignoreCase, stripParams bool) (string, bool) {
	if stripParams {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	p = path.Clean("/" + p)
	if ignoreCase {
		p = strings.ToLower(p)
	}
	for _, pat := range patterns {
		if ignoreCase {
			pat = strings.ToLower(pat)
		}
		subject := p
		if !strings.Contains(pat, "/") {
			subject = path.Base(p)
		}
		if ok, _ := path.Match(pat, subject); ok {
			return pat, true
		}
	}
	return "", false
}

// matchAny returns the first pattern that matches s.
func matchAny(patterns []string, s string) (string, bool) {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, s); ok {
			return pat, true
		}
	}
	return "", false
}

func (p *Proxy) headerTimeout() time.Duration {
	if p.HeaderTimeout > 0 {
		return p.HeaderTimeout
	}
	return DefaultHeaderTimeout
}

func (p *Proxy) maxHeaderBytes() int {
	if p.MaxHeaderBytes > 0 {
		return p.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func (p *Proxy) maxHeaders() int {
	if p.MaxHeaders > 0 {
		return p.MaxHeaders
	}
	return DefaultMaxHeaders
}

// countingWriter adds what it writes to one direction of the pair.
type countingWriter struct {
	w    *net.TCPConn
	pair *engine.Pair
	dir  engine.Direction
	idle time.Duration
}

// Write forwards b; a peer that takes nothing for idle ends the pair.
func (w *countingWriter) Write(b []byte) (int, error) {
	if w.idle > 0 {
		w.w.SetWriteDeadline(time.Now().Add(w.idle))
	}
	n, err := w.w.Write(b)
	w.pair.AddBytes(w.dir, int64(n))
	return n, err
}

// deadlineReader sets a read deadline before every read: the fixed one if
// set (a head being read), else idle from now. stop makes reads fail, so a
// body copy can be cut short although it sets its own deadlines.
type deadlineReader struct {
	c     *net.TCPConn
	idle  atomic.Int64 // a time.Duration: set while a read may run (waitResponse)
	fixed time.Time
	stop  atomic.Bool
}

func (r *deadlineReader) setIdle(d time.Duration) { r.idle.Store(int64(d)) }

// interrupt ends the read in progress, and fails every later one: the
// filter's own doing, no timeout of the peer's.
func (r *deadlineReader) interrupt() {
	r.stop.Store(true)
	r.c.SetReadDeadline(time.Now())
}

// waitResponse bounds reads by idle from now, the one in progress too:
// the request body, sent in the background, is done.
func (r *deadlineReader) waitResponse(idle time.Duration) {
	r.setIdle(idle)
	if idle > 0 {
		r.c.SetReadDeadline(time.Now().Add(idle))
	}
}

var errStopped = errors.New("read stopped")

func (r *deadlineReader) Read(b []byte) (int, error) {
	d := r.fixed
	if idle := time.Duration(r.idle.Load()); d.IsZero() && idle > 0 {
		d = time.Now().Add(idle)
	}
	r.c.SetReadDeadline(d)
	// Checked after setting the deadline: a stop that comes later also
	// sets a deadline in the past, which ends this read.
	if r.stop.Load() {
		return 0, errStopped
	}
	return r.c.Read(b)
}

// Package filter is the filtering proxy (class 4 in the papers): it reads every HTTP/1.1 request and response in both directions, so it never splices.
//
// For each request on a (keep-alive) client connection the filter reads the
// head, answers 403 and closes if the path matches a blocked pattern,
// otherwise forwards the head and streams the body (Content-Length or
// chunked) to the upstream, reads the response head and, if its media type
// is blocked, closes the upstream and answers 403 instead; an allowed
// response is streamed back. The request target is forwarded as it
// arrived, heads re-serialized canonically (canonicalHead), bodies
// streamed without being held in memory.
//
// Since both directions are inspected all the time there is never a moment
// when only forwarding is left: the pair stays in control mode and /flows
// shows engine copy with the note "filter inspects both directions".
// A 101 Switching Protocols response leaves nothing to inspect: the pair is
// then forwarded in control mode until it ends.
//
// Bad input gets a response and a close: 400 for a malformed head, a
// request target that origins could read as different paths (targetPath),
// a request with both Content-Length and Transfer-Encoding, or a request body
// that is malformed or ends early, 501 for a transfer coding other than
// chunked alone, 413 for a request body larger than
// http.max_body_bytes, 431 for a head over the size or header-count
// limit, 408 when the head does not arrive within the header timeout, 502
// when no upstream answers.
package filter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/httpcore"
)

// NoSpliceReason is what /flows shows for every filter pair.
const NoSpliceReason = "filter inspects both directions"

// Proxy filters HTTP/1.1 between clients and its upstreams.
type Proxy struct {
	// Upstreams are the servers one is picked from for each client
	// connection (and again after a blocked response closed the
	// upstream), those that fail (max_fails) skipped for a while.
	Upstreams *proxy.Pool
	// BlockPaths are path.Match patterns matched, ignoring case, against
	// the decoded request path as origins may read it (blockedPath); one
	// ending in "/*" matches the whole subtree, one without a slash any
	// segment. A match is answered 403 and the connection closed; a
	// target that origins read in more than one way, 400 (targetPath).
	BlockPaths []string
	// BlockContentTypes are path.Match patterns matched against the
	// response's media type (lower case, without parameters); a match is
	// replaced by a 403.
	BlockContentTypes []string
	// IdleTimeout bounds the wait for the next request and every read of a
	// body or response; 0 waits forever.
	IdleTimeout time.Duration
	// Limits are the http section's, as the HTTP proxies take them: the
	// timeouts (each 0: none; IdleTimeout, where shorter, bounds them)
	// and the bounds of a request head and body (413, 431 above; a head
	// bound 0 is none). Response heads get httpcore.ResponseLimits.
	Limits httpcore.Limits
	// ProxyProtocol ("v1", "v2" or empty) sends a PROXY protocol header to
	// each upstream before any client byte.
	ProxyProtocol string
}

// Pools implements proxy.PoolOwner: the upstream list.
func (p *Proxy) Pools() []*proxy.Pool { return []*proxy.Pool{p.Upstreams} }

// Close ends the upstreams' health checks (io.Closer: the forwarder
// closes the proxy once no pair uses it).
func (p *Proxy) Close() error { return p.Upstreams.Close() }

// FromConfig builds the proxy of a filter listener in front of ups (its
// upstream list, health checks started).
func FromConfig(lc config.Listener, ups *proxy.Pool) (proxy.Proxy, error) {
	p := &Proxy{Upstreams: ups, IdleTimeout: lc.IdleTimeout.Std(), ProxyProtocol: lc.ProxyProtocol}
	if lc.Filter != nil {
		p.BlockPaths, p.BlockContentTypes = lc.Filter.BlockPaths, lc.Filter.BlockContentTypes
	}
	p.Limits = httpcore.LimitsFrom(lc.HTTP.WithDefaults())
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
	srv      *proxy.Server   // up's server, held while up is open
	answered int             // responses up carried
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
	if pat, blocked := blockedPath(c.p.BlockPaths, req.path); blocked {
		c.s.Log().Info("filter blocked request", "path", req.path, "pattern", pat)
		c.refuse(http.StatusForbidden, "blocked by filter: path matches "+pat)
		return true, nil
	}
	if req.body.kind == sized {
		if err := httpcore.CheckBodySize(req.body.size, c.p.Limits.MaxBodyBytes); err != nil {
			c.refuse(err.Status, err.Reason)
			return true, err
		}
	}
	resp, bodyDone, err := c.roundTrip(ctx, req)
	if err != nil {
		srv := c.srv // nil when no upstream connected
		// A kept connection the server closed as the request went out
		// (its keep-alive ended): no failure of the server's.
		stale := c.answered > 0 && errors.Is(err, errNoResponse)
		c.closeUpstream()
		if bodyDone != nil {
			err = errors.Join(err, c.waitBody(bodyDone))
		}
		if bad := (*clientBodyError)(nil); errors.As(err, &bad) {
			c.refuse(bad.refusal())
			return true, err
		}
		if srv != nil && !stale && ctx.Err() == nil {
			// The server took the request and gave no valid response
			// head (closed, reset, response_timeout, a bad head): a
			// failure, as a failed connect is (Pool.Dial counted those).
			c.p.Upstreams.Failed(srv, c.s.Log())
		}
		if errors.Is(err, proxy.ErrResponseTimeout) {
			c.refuse(http.StatusGatewayTimeout, "no response from the upstream in time")
			return true, err
		}
		c.refuse(http.StatusBadGateway, "no valid response from the upstream")
		return true, err
	}
	c.p.Upstreams.Succeeded(c.srv)
	c.answered++
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
	if err := copyBody(cw, c.upr, resp.body, 0); err != nil {
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

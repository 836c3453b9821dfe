// A client connection's current upstream: kept, taken from the pool or dialled for a request, retried once when a reused one turns out closed, and given back to the pool.

package httpcore

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// recheckAfter is how long a kept connection may sit idle before it is
// checked like a pooled one: servers close idle keep-alive connections
// after seconds, and a request that cannot be retried should not find out.
const recheckAfter = time.Second

// upstream is the upstream connection the current request goes to, kept for
// the next request to the same place.
type upstream struct {
	key  string
	conn *net.TCPConn
	// tls, if not nil, is the TLS connection over conn the proxy reads
	// and writes (Conn.UpstreamTLS): no body to or from it is spliced.
	tls *tls.Conn
	in  *idleReader // what r reads from
	r   *bufio.Reader
	// place counts the connection against its server's bound
	// (max_conns) while counted: from the request it carries until its
	// response is read whole, or it is given up.
	place   Place
	counted bool
	reused  bool // it already carried a request, for this client or another
	// idle: the last response on it was read whole and the server keeps
	// the connection open, so it may carry another request; since when.
	idle      bool
	idleSince time.Time
	// unframed: the last response had no body by its status or its
	// request's method (HEAD, 204, 304), not by a length the server
	// wrote: a server that sent one all the same has it arrive after
	// the head, so the connection is checked for stray bytes before it
	// carries another request, however fresh (keptUsable).
	unframed bool
	// closing: the request on it asked the server to close the
	// connection after the response (closesUpstream), so it is not kept.
	closing bool
	// doubtful: the last response's framing is in doubt (both
	// Content-Length and Transfer-Encoding): the connection is closed
	// after it, never kept.
	doubtful bool
	// dl is the standing control-mode deadline, lifted before the
	// connection goes to the pool.
	dl idleDeadline
}

// Dialer connects to one upstream through the Session.
type Dialer func(ctx context.Context) (*net.TCPConn, error)

// Place is a connection's place at its server (max_conns), taken by the
// caller before Use; Release gives it back.
type Place interface{ Release() }

// Use makes the upstream named key current: the kept connection when the
// last request went to key too, else an idle one from Pool, else a new one
// from dial. The one it replaces goes back to Pool or is closed. place, if
// not nil, is released once the response is read whole, or when the
// connection is given up.
//
// As with HAProxy's http-reuse safe, a client connection's first request
// takes no pooled connection unless it could be retried (Retryable): a
// server may close an idle connection just as the request goes out, and
// only a retry hides that from a client that has never been answered.
func (c *Conn) Use(ctx context.Context, key string, dial Dialer, place Place) error {
	if c.Keeps(key) {
		switch {
		case place == nil:
		case c.up.counted:
			place.Release() // the kept connection's own place still stands
		default:
			c.up.place, c.up.counted = place, true // its idle time gave its place back
		}
		return nil
	}
	c.Close()
	if c.Pool != nil && c.upstreamTLS(key) == nil && (c.requests > 1 || (c.cur != nil && Retryable(c.cur))) {
		if conn := c.Pool.Get(c.poolKey(key)); conn != nil {
			c.adopt(conn)
			c.attach(key, conn, nil, place, true)
			return nil
		}
	}
	conn, tc, err := c.dialNew(ctx, key, dial)
	if err != nil {
		if place != nil {
			place.Release()
		}
		return err
	}
	c.attach(key, conn, tc, place, false)
	return nil
}

// Keeps reports whether the connection kept from the last request goes
// to key and can carry the next request: Use would keep it, and the caller
// need not build its dialer.
func (c *Conn) Keeps(key string) bool {
	return c.up != nil && c.up.key == key && c.keptUsable()
}

// keptUsable reports whether the kept connection can carry the next
// request; one idle for a while, or any for a request that cannot be sent
// twice (a POST: a retry could not hide a closed connection), is checked
// as the pool checks (a peek), and closed if the server closed it.
func (c *Conn) keptUsable() bool {
	if !c.up.idle {
		return true
	}
	fresh := time.Since(c.up.idleSince) < recheckAfter && (c.cur == nil || Retryable(c.cur)) && !c.up.unframed
	if fresh || Reusable(c.up.conn) {
		return true
	}
	c.up.idle = false // closed, not pooled
	c.Close()
	return false
}

// dialNew dials a new upstream connection for key and sends it the PROXY
// protocol header, if the listener sends one: once per connection. Where
// UpstreamTLS gives key a configuration, the TLS handshake follows,
// bounded by the response timeout, and tc is the connection to use.
func (c *Conn) dialNew(ctx context.Context, key string, dial Dialer) (conn *net.TCPConn, tc *tls.Conn, err error) {
	conn, err = dial(ctx)
	if err == nil && c.ProxyProtocol != "" {
		if err = proxyproto.Send(c.ProxyProtocol, c.S.Pair(), conn); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if cfg := c.upstreamTLS(key); cfg != nil {
		if d := c.responseIdle(); d > 0 {
			conn.SetDeadline(time.Now().Add(d))
		}
		tc = tls.Client(conn, cfg)
		if err = tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("tls handshake with %s: %w", conn.RemoteAddr(), err)
		}
		conn.SetDeadline(time.Time{})
	}
	return conn, tc, nil
}

// upstreamTLS is the TLS configuration of the upstream named key, nil
// for plain TCP.
func (c *Conn) upstreamTLS(key string) *tls.Config {
	if c.UpstreamTLS == nil {
		return nil
	}
	return c.UpstreamTLS(key)
}

// attach makes conn the current upstream, reading it through the
// connection's one upstream reader: through tc, its TLS connection, if
// not nil.
func (c *Conn) attach(key string, conn *net.TCPConn, tc *tls.Conn, place Place, reused bool) {
	c.upMem = upstream{key: key, conn: conn, tls: tc, in: &c.upIn, place: place, counted: place != nil, reused: reused}
	c.up = &c.upMem
	c.up.dl.conn = conn
	c.upIn = idleReader{dl: &c.up.dl, conn: c.up.net(), idle: c.responseIdle(), stopped: &c.stopped, pair: c.S.Pair()}
	if rc, err := conn.SyscallConn(); err == nil && tc == nil {
		c.upIn.rc = rc
	}
	c.upW.use(c.up.net(), c.upIn.rc)
	if c.upR == nil {
		c.upR = bufio.NewReaderSize(&c.upIn, readerSize)
	} else {
		c.upR.Reset(&c.upIn)
	}
	c.up.r = c.upR
}

// net is what the proxy reads and writes the upstream through: its TLS
// connection, or its socket.
func (up *upstream) net() net.Conn {
	if up.tls != nil {
		return up.tls
	}
	return up.conn
}

// adopt records a pooled connection as the pair's upstream, for the engines,
// /flows and the logs, with no deadline left from its earlier use.
func (c *Conn) adopt(conn *net.TCPConn) {
	conn.SetDeadline(time.Time{})
	if a, ok := c.S.(proxy.UpstreamAdopter); ok {
		a.AdoptUpstream(conn)
		return
	}
	c.S.Pair().SetUpstream(conn)
}

// poolKey is key in the pool: with the connection's class, if any.
func (c *Conn) poolKey(key string) string {
	if c.Class == "" {
		return key
	}
	return key + " " + c.Class
}

// Close gives up the current upstream: back to the pool when it may carry
// another request, else closed. Its place is released.
func (c *Conn) Close() {
	up := c.up
	if up == nil {
		return
	}
	c.up = nil
	if !c.park(up) {
		up.conn.Close()
	}
	if up.counted {
		up.place.Release()
	}
}

// park gives up to the pool a connection on which the last response was
// read whole, nothing more arrived, and no engine holds the pair: the proxy
// is in control mode with nothing owed either way. The pair stops naming it,
// so that the forwarder does not close it with the pair.
func (c *Conn) park(up *upstream) bool {
	p := c.S.Pair()
	// The pool keeps sockets, not TLS sessions: a TLS upstream is kept
	// by its client connection only.
	if c.Pool == nil || up.tls != nil || !up.idle || up.r.Buffered() > 0 || c.stopped.Load() || p.State() != engine.StateControl {
		return false
	}
	if p.Upstream() == up.conn {
		p.SetUpstream(nil)
	}
	up.dl.lift() // the pool checks it with a read, which a past deadline fails
	return c.Pool.Put(c.poolKey(up.key), up.conn)
}

// responseRead is called once the response was read whole from the
// upstream: it stays for the next request if the server keeps it open,
// the response's framing is not in doubt, and nothing came past the
// response, else it is closed. Bytes past a response are none the proxy
// asked for (it sends one request at a time): kept, they would be read
// as the next request's response, which its client would get.
func (c *Conn) responseRead(upKeep bool) {
	if !upKeep || c.up.doubtful || c.up.r.Buffered() > 0 {
		c.Close()
		return
	}
	c.up.idle, c.up.idleSince = true, time.Now()
	// A server's place (max_conns) is for a request in flight: a kept
	// connection gives it back while idle, and the next request on it
	// takes one again (Use).
	if c.up.counted {
		c.up.place.Release()
		c.up.counted = false
	}
}

// RoundTrip sends req to the current upstream (head, then body) and reads
// the response head. When a reused connection fails before a byte of the
// response arrived (the server closed it meanwhile) and req can be retried
// (Retryable), it is sent once more on a new connection from redial. Any
// error means the request failed before a byte of the response reached the
// client.
func (c *Conn) RoundTrip(ctx context.Context, req *http.Request, redial Dialer) (*http.Response, error) {
	start := time.Now()
	resp, err := c.roundTripRetried(ctx, req, redial)
	c.curUpstream += time.Since(start) // the access log's upstream time
	return resp, err
}

// roundTripRetried is RoundTrip but for its timing.
func (c *Conn) roundTripRetried(ctx context.Context, req *http.Request, redial Dialer) (*http.Response, error) {
	before := c.up.in.n
	resp, err := c.roundTrip(ctx, req)
	stale := err != nil && c.up.reused && c.up.in.n == before && isStale(err)
	retry := stale && Retryable(req) && redial != nil
	if stale && !retry {
		// A kept connection the server closed as the request went
		// out: its keep-alive ending, not a failure of the server.
		c.upFailed = false
	}
	if retry {
		c.S.Log().Debug("reused upstream connection closed under the request: retrying on a new one", "err", err)
		key := c.up.key
		var place Place
		if c.up.counted {
			place = c.up.place
		}
		c.up.counted = false
		c.Close() // not idle: closed
		conn, tc, derr := c.dialNew(ctx, key, redial)
		if derr != nil {
			if place != nil {
				place.Release()
			}
			return nil, derr
		}
		c.attach(key, conn, tc, place, false)
		resp, err = c.roundTrip(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	c.up.reused = true
	return resp, nil
}

// Retryable reports whether req may be sent again after a connection failed
// under it: an idempotent method (RFC 9110 section 9.2.2) and no body, which
// went through an engine and is gone.
func Retryable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return requestBody(req) == bodyNone
	}
	return false
}

// isStale says err is what a kept connection the upstream closed gives.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

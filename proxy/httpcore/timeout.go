// The response timeout: how long the proxy waits for the upstream, and for a client to take its response, once a request is sent; and whose a timeout was.

package httpcore

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/splicer/splicer/proxy"
)

// ResponseIdle is the bound on each wait for the upstream once a request
// is sent, in every HTTP kind: response (http.response_timeout) where it
// is shorter than idle, else idle.
func ResponseIdle(idle, response time.Duration) time.Duration { return shorter(idle, response) }

// shorter is bound where that is set and shorter than idle (0: never),
// else idle.
func shorter(idle, bound time.Duration) time.Duration {
	if bound > 0 && (idle <= 0 || bound < idle) {
		return bound
	}
	return idle
}

// clientIdle bounds each wait for the client in control mode: for its
// next request on a kept connection (KeepaliveTimeout where that is
// shorter than Idle), and anything no tighter bound covers (a request
// body has bodyIdle's, the client's taking a response clientFull's).
func (c *Conn) clientIdle() time.Duration { return KeepaliveIdle(c.Idle, c.Limits.KeepaliveTimeout) }

// KeepaliveIdle is the bound on the wait for the next request on a kept
// connection, in every HTTP kind: keepalive (http.keepalive_timeout)
// where it is shorter than idle, else idle.
func KeepaliveIdle(idle, keepalive time.Duration) time.Duration { return shorter(idle, keepalive) }

// responseIdle is this connection's ResponseIdle: the bound on each wait
// for the upstream once a request is sent, and for the client to take
// its response (clientFull).
func (c *Conn) responseIdle() time.Duration { return ResponseIdle(c.Idle, c.Limits.ResponseTimeout) }

// upIdle bounds each wait for the current upstream: responseIdle, but
// Idle while a request body goes to it (bodyUp).
func (c *Conn) upIdle() time.Duration {
	if c.sendingBody {
		return c.Idle
	}
	return c.responseIdle()
}

// clientFull bounds the wait for a client whose socket takes nothing more
// of what the proxy sends it (the rest of a response, mostly) by the
// response timeout, where that is shorter than Idle: a client that stops
// reading a response holds the pair, and its upstream connection, no
// longer than a server that stops sending one would. Called only when a
// write waits, so a client that reads costs no deadline update.
func (c *Conn) clientFull() {
	bound := c.responseIdle()
	if bound == c.clientIdle() {
		c.clientDL.refresh(bound, &c.stopped)
		return
	}
	c.clientDL.reset(bound, &c.stopped) // the one in place may be further off
}

// timedOut marks err as the upstream's or the client's timeout while a
// response is relayed (upstreamTimedOut, clientTimedOut).
func (c *Conn) timedOut(err error) error {
	if err == nil {
		return nil
	}
	return c.clientTimedOut(c.upstreamTimedOut(err))
}

// clientTimedOut marks err as the client's timeout (close reason
// client_timeout) when it is a write to the client that outlasted its
// deadline. A kernelCopy's splice waits on both connections, with the
// same bound: its timeout says neither, and is left as it is.
func (c *Conn) clientTimedOut(err error) error {
	if err == nil || c.stopped.Load() || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, proxy.ErrResponseTimeout) ||
		!opOn(err, c.S.Pair().Client, "write", "raw-write") {
		return err
	}
	return fmt.Errorf("%w: %w", proxy.ErrClientTimeout, err)
}

// upstreamTimedOut marks err as the response timeout (a 504 before the
// response head, close reason upstream_timeout) when it is a read of
// the current upstream that outlasted its deadline.
func (c *Conn) upstreamTimedOut(err error) error {
	if err == nil || c.up == nil || c.stopped.Load() || !errors.Is(err, os.ErrDeadlineExceeded) || !opOn(err, c.up.conn, "read", "raw-read") {
		return err
	}
	return fmt.Errorf("%w: nothing for %v: %w", proxy.ErrResponseTimeout, c.upIdle(), err)
}

// opOn reports whether err is a failed operation, one of ops, on conn (as
// net.OpError names them). Apart from the callers' quick checks, so that
// its error variable is allocated only for an error.
func opOn(err error, conn *net.TCPConn, ops ...string) bool {
	var op *net.OpError
	return errors.As(err, &op) && slices.Contains(ops, op.Op) && op.Addr != nil &&
		op.Addr.String() == conn.RemoteAddr().String()
}

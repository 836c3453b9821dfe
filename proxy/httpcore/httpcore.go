// Package httpcore is what the HTTP proxy kinds (http-forward, http-reverse) share: reading HTTP/1.1 heads within limits, relaying one exchange with the body spliced when its length is known, and the answers to bad input.
//
// A Conn is one client connection. Its proxy loops: ReadRequest (in control
// mode, with the slowloris timeout and the size and count limits), decide
// where the request goes, Use an upstream connection (dialled through the
// Session, so it becomes the pair's upstream), RoundTrip the request and
// Relay the response. A body whose length is known is spliced by the
// listener's engine with an exact byte limit, after which the proxy is back in
// control mode for the next request on the same connection; a chunked body is
// streamed by the proxy itself, parsed chunk by chunk so that it knows where
// the body ends.
//
// A body http-reverse relays in control mode (below the engines' floor,
// ReverseCopyBelow) still does not pass through the process once the head
// reader is empty and more than 64 KiB remain: net.TCPConn.ReadFrom moves
// it with splice(2) through a pooled pipe (kernelCopy). The standard
// library does what splicing needs here (an exact byte count through an
// io.LimitedReader, Go's poller, the connections' deadlines), and costs
// none of an engine's per-splice setup. Not where the client's congestion
// control is bbr: its pacing makes such a body cost the proxy twice the
// CPU of one copied through the buffer (paced).
//
// Bytes are never lost between the two modes: the proxy reads heads through a
// bufio.Reader, and before a splice it writes out whatever that reader
// already holds of the body and splices only the rest.
//
// Heads of the common shape are parsed by a hand-written parser
// (fastparse.go), not net/http's: a proxy should use a well-kept library
// unless splicing needs control the library hides, and what net/http
// hides here is its cost per request (a textproto.Reader, allocations per
// line, and a second pass for the strict checks: ~3.5 µs of a small
// request's ~30 µs in the proxy). The parser takes only what it fully
// understands, applies every check of ValidateHead in the same pass, and
// gives the same fields as net/http (FuzzFastParse holds it to that); any
// other head, valid or not, goes to ValidateHead and net/http as before.
//
// A small exchange on a kept connection costs four system calls: the
// request is written by the read that waits for its response, and the
// response by the read that waits for the next request (sendThenRead), each
// a raw, non-blocking call that keeps the goroutine's P (rawio.go); every
// other read and write in control mode is raw as well (rawRead,
// rawWriter), so that sysmon never finds a P in a system call. A proxy
// that keeps no request or response, nor any of their strings, past its
// exchange (http-reverse) has them built in the memory of the last ones,
// the heads' text included (Conn.Reuse): with httprev's Forwarded value
// written the same way, a small exchange allocates nothing, and so brings
// no garbage collection, whose stops of the world were the proxy's p99.
package httpcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
)

// Limits bound what a client may send before the proxy decides.
type Limits struct {
	// HeaderTimeout bounds reading a request head from its first byte.
	HeaderTimeout time.Duration
	// RequestTimeout bounds the first request's head from accept.
	RequestTimeout time.Duration
	// BodyTimeout bounds each wait for more of a request body (408
	// after); the idle timeout, when shorter, bounds it instead.
	BodyTimeout time.Duration
	// BodyMinRate bounds a request body's whole time: after a grace of
	// its idle bound (BodyIdle), each byte buys 1/BodyMinRate second
	// more (408 after); 0 sets no bound.
	BodyMinRate int64
	// ResponseTimeout bounds each wait for the upstream once a request is
	// sent (504 before the response head); the idle timeout, when
	// shorter, bounds it instead.
	ResponseTimeout time.Duration
	// KeepaliveTimeout bounds the wait for the next request on a kept
	// connection, and the client's other waits in control mode where no
	// tighter bound applies; the idle timeout, when shorter, bounds it
	// instead.
	KeepaliveTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers together.
	MaxHeaderBytes int
	// MaxHeaders bounds the number of header lines.
	MaxHeaders int
	// MaxBodyBytes bounds a request body (413 above); 0 sets no bound.
	MaxBodyBytes int64
}

// LimitsFrom takes the limits of an http section with its defaults filled in.
func LimitsFrom(h config.HTTP) Limits {
	return Limits{HeaderTimeout: h.HeaderTimeout.Std(), RequestTimeout: h.RequestTimeout.Std(),
		BodyTimeout: h.BodyTimeout.Std(), BodyMinRate: int64(h.BodyMinRate), ResponseTimeout: h.ResponseTimeout.Std(),
		KeepaliveTimeout: h.KeepaliveTimeout.Std(), MaxHeaderBytes: int(h.MaxHeaderBytes), MaxHeaders: h.MaxHeaders,
		MaxBodyBytes: int64(h.MaxBodyBytes)}
}

// ResponseLimits bound a response head from an upstream: generous, since
// upstreams are trusted more than clients, but still bounded.
var ResponseLimits = Limits{MaxHeaderBytes: 256 << 10, MaxHeaders: 1000}

// StatusError is a request the proxy answers itself with Status and then
// closes the client connection.
type StatusError struct {
	Status int
	Reason string
	Err    error
}

func (e *StatusError) Error() string {
	msg := strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *StatusError) Unwrap() error { return e.Err }

// BadInput marks the client's errors for the close reason bad_request:
// 4xx, and the 501 and 505 the proxy answers a transfer coding or an HTTP
// version it does not take with (the upstream's failures are 502-504).
func (e *StatusError) BadInput() bool {
	return e.Status >= 400 && e.Status < 500 || e.Status == http.StatusNotImplemented || e.Status == http.StatusHTTPVersionNotSupported
}

// Errorf returns a *StatusError with a formatted reason.
func Errorf(status int, format string, args ...any) *StatusError {
	return &StatusError{Status: status, Reason: fmt.Sprintf(format, args...)}
}

// ErrNoRequest says the client closed the connection, or left it idle,
// between requests: the end of a keep-alive connection, answered with nothing.
var ErrNoRequest = errors.New("no request")

// Serve runs handle for each request on c until the client is done, a
// request asks for the connection to close, or something fails. A failure
// that carries a *StatusError is answered with that status before closing.
// Serve returns nil when the client simply went away.
func Serve(ctx context.Context, c *Conn, handle func(ctx context.Context, req *http.Request) (keep bool, err error)) error {
	stop := context.AfterFunc(ctx, c.interrupt)
	defer stop()
	defer c.release()
	defer close(c.stop.done)
	defer c.Close()
	for {
		req, err := c.ReadRequest(ctx)
		if err == nil {
			var keep bool
			keep, err = handle(ctx, req)
			if err == nil && keep {
				continue
			}
		}
		return c.finish(ctx, err)
	}
}

// finish answers err if it asks for a status, and says how the pair ended.
func (c *Conn) finish(ctx context.Context, err error) error {
	if ferr := c.flush(); ferr != nil && err == nil {
		err = ferr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		return nil // a client that asked to close: the variable below would cost it an allocation
	}
	var se *StatusError
	switch {
	case errors.Is(err, ErrNoRequest) && errors.Is(err, syscall.ETIMEDOUT):
		// Not a client that went away but one that vanished between
		// requests (tcp_keepalive found it gone): counted as peer_timeout.
		return err
	case errors.Is(err, ErrNoRequest):
		return nil
	case errors.As(err, &se):
		c.S.Log().Info("request refused", "status", se.Status, "reason", se.Error())
		c.Fail(se.Status, se.Reason)
	}
	return err
}

// Fail answers the client with status and a one-line text body, then closes
// its sending side and drains what the client still sends for a moment, so
// that unread request bytes do not turn the close into a reset that would
// destroy the answer before the client read it.
func (c *Conn) Fail(status int, reason string) {
	defer c.record(status)
	body := strconv.Itoa(status) + " " + http.StatusText(status) + ": " + reason + "\n"
	head := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n"
	client := c.S.Pair().Client
	client.SetWriteDeadline(time.Now().Add(lingerFor))
	if err := c.writeClient([]byte(head + body)); err != nil {
		return
	}
	if c.clientTLS {
		if cw, ok := c.clientConn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite() // close_notify, before the socket's FIN
		}
	}
	client.CloseWrite()
	client.SetReadDeadline(time.Now().Add(lingerFor))
	io.CopyN(io.Discard, client, lingerBytes)
}

// lingerFor and lingerBytes bound the drain after an error answer.
const (
	lingerFor   = time.Second
	lingerBytes = 1 << 20
)

// UpstreamError answers a request whose upstream failed: 504 when it timed
// out, 502 otherwise. The cause stays wrapped, so the pair's close reason
// still names it. An error that carries its answer already (a client's
// bad request body: 400) keeps it.
func UpstreamError(err error) *StatusError {
	if se := (*StatusError)(nil); errors.As(err, &se) {
		return se // the exchange already has its answer (a client's bad body: 400)
	}
	if errors.Is(err, proxy.ErrDestinationDenied) {
		return &StatusError{Status: http.StatusForbidden, Reason: "destination not allowed", Err: err}
	}
	status := http.StatusBadGateway
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, proxy.ErrUpstreamTimeout) || errors.Is(err, proxy.ErrResponseTimeout) {
		status = http.StatusGatewayTimeout
	}
	return &StatusError{Status: status, Reason: "upstream failed", Err: err}
}

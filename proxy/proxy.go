// Package proxy defines what a proxy kind gets from the forwarder: a Session for each client connection.
//
// A proxy runs a pair in control mode: it reads what it must, decides, dials
// the upstream with Session.Dial and, once only forwarding is left, calls
// Session.Splice, which hands the pair to the listener's engine and falls
// back to a shallower engine when the deeper one cannot take it. The four
// proxy classes of the papers map onto kinds: tcp (class 1, L4 routing),
// socks5 (class 2, authenticating gateway), http-forward and http-reverse
// (class 3, control one way) and filter (class 4, never spliced).
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/splicer/splicer/engine"
)

// Proxy serves one client connection at a time per call; the forwarder calls
// Serve concurrently for every accepted connection.
type Proxy interface {
	// Serve runs the pair until it is done. The forwarder closes both
	// connections after Serve returns.
	Serve(ctx context.Context, s Session) error
}

// Session is the forwarder's side of one pair.
type Session interface {
	// Pair is the pair being served.
	Pair() *engine.Pair
	// Log is a logger carrying the pair's listener, id and client address.
	Log() *slog.Logger
	// Dial connects to addr within the listener's connect timeout and
	// records the connection as the pair's upstream.
	Dial(ctx context.Context, addr string) (*net.TCPConn, error)
	// Splice puts the pair into forwarding mode with the listener's engine
	// (or a shallower one) until opts say stop. In control mode again after
	// it returns when Result.End.KeepsPair().
	Splice(ctx context.Context, opts engine.Options) (engine.Result, error)
	// Forward moves bytes in control mode: the proxy's own copy loop, with
	// the same options as Splice, for when the pair must not be spliced yet.
	Forward(ctx context.Context, opts engine.Options) (engine.Result, error)
	// NoSplice records why the pair is kept in control mode (for /flows).
	NoSplice(reason string)
	// Stopping is closed when a graceful shutdown begins: a proxy between
	// requests (an idle keep-alive connection) should end the pair then,
	// and one in the middle of a request should finish it first.
	Stopping() <-chan struct{}
	// AtEnd has f called once the pair has ended, which may be after
	// Serve returned: an engine that follows a pair on its own (ip's
	// detached pairs) keeps it alive past its proxy.
	AtEnd(f func())
}

// UpstreamAdopter is a Session that can take, as its pair's upstream, a
// connection dialled earlier for another pair (an HTTP proxy's pool of idle
// upstream connections), as Dial records the connections it makes.
type UpstreamAdopter interface {
	AdoptUpstream(c *net.TCPConn)
}

// FileReloader is a proxy that reads files of its own (http-reverse's TLS
// certificates): a reload that keeps its listener reads them again.
type FileReloader interface {
	// ReloadFiles reads the files and returns what puts them in use for
	// new connections, or an error, which refuses the reload.
	ReloadFiles() (commit func(), err error)
}

// DialClass returns what s's upstream connections carry of their client
// beyond the listener's settings ("" for nothing): connections of different
// classes must not be shared between pairs. The forwarder's sessions have
// upstream SYNs announce the client's MSS when engine ip may splice the
// pair, so that the server never sends a segment larger than the client
// takes.
func DialClass(s Session) string {
	if dc, ok := s.(interface{ DialClass() string }); ok {
		return dc.DialClass()
	}
	return ""
}

// Upstream errors, classified for metrics and logs.
var (
	ErrUpstreamRefused     = errors.New("upstream refused the connection")
	ErrUpstreamUnreachable = errors.New("upstream unreachable")
	ErrUpstreamTimeout     = errors.New("upstream connect timed out")
	// ErrResponseTimeout: the upstream sent nothing of its response for
	// the HTTP kinds' response_timeout (close reason upstream_timeout).
	ErrResponseTimeout = errors.New("upstream response timed out")
	// ErrClientTimeout: the client took nothing of what the proxy sent it
	// for the HTTP kinds' response_timeout (close reason client_timeout).
	ErrClientTimeout = errors.New("client took nothing of its response in time")
	// ErrUpstreamReset: the upstream took the connection and reset it
	// before the forwarder saw it open (a server that resets at once);
	// counted as a reset, as the pair's other resets.
	ErrUpstreamReset = errors.New("upstream reset the connection")
	// ErrDestinationDenied: the listener's destination rules (or their
	// defaults: no loopback, metadata, the forwarder itself...) refuse
	// where the client asked to go. http-forward answers 403, socks5
	// reply 2.
	ErrDestinationDenied = errors.New("destination not allowed")
)

type destNameKey struct{}

// WithDestinationName tells Session.Dial the name the client asked for,
// when the proxy resolved it itself and dials an address (socks5), so the
// listener's name rules apply to it.
func WithDestinationName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, destNameKey{}, name)
}

// DestinationName is the name WithDestinationName put in ctx, or "".
func DestinationName(ctx context.Context) string {
	n, _ := ctx.Value(destNameKey{}).(string)
	return n
}

// CloseReason maps the error a proxy's Serve returned, or the splice's end,
// to the reason label of splicer_connections_closed_total.
func CloseReason(err error) string {
	switch {
	case err == nil:
		return "eof"
	case errors.Is(err, ErrUpstreamRefused):
		return "upstream_refused"
	case errors.Is(err, ErrUpstreamUnreachable):
		return "upstream_unreachable"
	case errors.Is(err, ErrUpstreamTimeout), errors.Is(err, ErrResponseTimeout):
		return "upstream_timeout"
	case errors.Is(err, ErrUpstreamReset):
		return "reset"
	case errors.Is(err, ErrClientLeft):
		return "client_left"
	case errors.Is(err, ErrDestinationDenied):
		return "destination_denied"
	case errors.Is(err, ErrClientTimeout):
		return "client_timeout"
	case errors.Is(err, context.Canceled):
		return "shutdown"
	case errors.Is(err, syscall.ETIMEDOUT):
		// A peer stopped answering: tcp_keepalive's probes or the
		// retransmissions of unacknowledged bytes went unanswered. The
		// engines end such a pair as a reset (the other side is reset),
		// but no reset came: the peer may be gone without a trace.
		return "peer_timeout"
	}
	var named interface{ CloseReason() string }
	if errors.As(err, &named) {
		return named.CloseReason() // a proxy's own refusal (tcp's hello refusals)
	}
	var bad interface{ BadInput() bool }
	if errors.As(err, &bad) && bad.BadInput() {
		return "bad_request"
	}
	var se *SpliceEnd
	if errors.As(err, &se) {
		if se.End == engine.EndCancel {
			return "shutdown" // the forwarder cancels pairs only when shutting down
		}
		return se.End.String()
	}
	return "proxy_error"
}

// SpliceEnd is returned by a proxy whose pair ended in forwarding mode other
// than by EOF (reset, idle, cancel, error), so the close reason is counted.
type SpliceEnd struct {
	End engine.End
	Err error
}

func (e *SpliceEnd) Error() string {
	if e.Err != nil {
		return "splice ended by " + e.End.String() + ": " + e.Err.Error()
	}
	return "splice ended by " + e.End.String()
}

func (e *SpliceEnd) Unwrap() error { return e.Err }

// EndErr turns how a final splice ended into Serve's return value: nil for
// EOF, a *SpliceEnd otherwise.
func EndErr(r engine.Result) error {
	if r.End == engine.EndEOF {
		return nil
	}
	return &SpliceEnd{End: r.End, Err: r.Err}
}

// Request is one HTTP request a proxy answered, for the access log and the
// per-listener status counters.
type Request struct {
	Method, Host, Path string
	// Target is the request target as the client sent it (path and
	// query), Proto its protocol ("HTTP/1.1"); UserAgent, Referer and
	// RequestID (X-Request-ID, as the proxy sent it on, or as the client
	// sent it if sane: see httpcore.ValidRequestID) are its header
	// fields'. These strings may share memory with the next request: a
	// recorder copies what it keeps past the call.
	Target, Proto                 string
	UserAgent, Referer, RequestID string
	Status                        int
	// Bytes is what the client was sent for the request, head included;
	// BytesUp what went upstream for it, its head as the proxy rewrote
	// it and its body (0 for a request answered without an upstream).
	Bytes, BytesUp int64
	// Kernel and Spliced are the parts of Bytes that did not pass
	// through the proxy's memory: moved by splice(2) in control mode
	// (Kernel), or by the listener's engine (Spliced). The rest was
	// copied.
	Kernel, Spliced int64
	Duration        time.Duration
	// Upstream is how long the back end took to send its response head,
	// from the request's start on its way there; 0 for an answer the
	// proxy gave itself.
	Upstream time.Duration
}

// RequestRecorder is a Session that records HTTP requests (the forwarder's
// does); HTTP proxies report each answered request to it.
type RequestRecorder interface {
	RecordRequest(r Request)
}

// RequestLogger is a Session that writes an access log line for each
// answered request; HTTP proxies report each to it, after RecordRequest.
type RequestLogger interface {
	LogRequest(r Request)
}

// ServerHealth is one back-end server's health-check state, whether it
// is skipped for failures, how many it had (Failures), and whether an
// operator drained it.
type ServerHealth struct {
	Pool   string `json:"pool"`
	Server string `json:"server"`
	// ResolvedFrom is the name Server's address was found under (a
	// server that resolves); empty for one given by address.
	ResolvedFrom string `json:"resolved_from,omitempty"`
	Healthy      bool   `json:"healthy"`
	Skipped      bool   `json:"skipped"`
	Failures     uint64 `json:"failures"`
	Drained      bool   `json:"drained"`
	Backup       bool   `json:"backup"`
	// Active is the connections it carries (see config.PoolServer.MaxConns).
	Active int64 `json:"active"`
}

// PoolOwner is a proxy that picks among back-end servers (http-reverse's
// pools, tcp's and filter's upstream lists): the forwarder exports their
// health at scrape time and drains them when an operator asks.
type PoolOwner interface {
	Pools() []*Pool
}

// PoolStats are one back-end server's counters in a proxy's pool of idle
// upstream connections: requests that took a pooled connection (Hits) or
// dialled (Misses), pooled connections found closed by the server when
// taken (Stale), and the connections waiting now (Idle).
type PoolStats struct {
	Server              string
	Hits, Misses, Stale uint64
	Idle                int
}

// PoolReporter is a proxy with a pool of idle upstream connections
// (http-reverse): the forwarder exports its counters at scrape time.
type PoolReporter interface {
	UpstreamPool() []PoolStats
}

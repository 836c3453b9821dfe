// Routing a tcp listener's connections by their TLS ClientHello: the server name and ALPN pick a pool, and the hello is replayed to the server picked.

package tcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/tlshello"
)

// HelloRouter picks a pool for each connection by its ClientHello, as a
// content-aware switch with delayed binding: the proxy reads the hello,
// and only then connects to a server. It never terminates TLS: the
// server gets the hello as the client sent it.
type HelloRouter struct {
	// Routes are tried in order; the first that matches picks the pool.
	Routes []TLSRoute
	// Default takes the hellos no route matches (no server name, an
	// unknown one); nil refuses them.
	Default *proxy.Pool
	// Timeout bounds the wait, from accept, for the whole hello.
	Timeout time.Duration

	// pools are the listener's pools, each once, in configuration order.
	pools []*proxy.Pool
}

// TLSRoute sends the hellos that match it to Pool.
type TLSRoute struct {
	config.TLSRoute
	Pool *proxy.Pool
}

// Matches reports whether hello h takes the route: its server name is the
// route's (in lower case), or ends in the route's .suffix for *.suffix,
// and it offers the route's ALPN protocol; a rule left empty matches all.
func (r *TLSRoute) Matches(h *tlshello.Hello) bool {
	if r.ALPN != "" && !slices.Contains(h.ALPN, r.ALPN) {
		return false
	}
	switch suffix, wild := strings.CutPrefix(r.ServerName, "*"); {
	case r.ServerName == "":
		return true
	case wild:
		return len(h.ServerName) > len(suffix) && strings.HasSuffix(h.ServerName, suffix)
	}
	return h.ServerName == r.ServerName
}

// NewHelloRouter builds the router of a tcp listener with tls_routes or
// a default_pool, and starts its pools' health checks, dialling with dial.
func NewHelloRouter(lc config.Listener, dial proxy.CheckDialer, log *slog.Logger) *HelloRouter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &HelloRouter{Timeout: lc.HelloTimeout()}
	pools := map[string]*proxy.Pool{}
	for _, pc := range lc.Pools {
		pl := proxy.NewPool(pc)
		pl.StartChecks(dial.SendingProxyHeader(lc.ProxyProtocol), log)
		pools[pc.Name] = pl
		r.pools = append(r.pools, pl)
	}
	for _, rc := range lc.TLSRoutes {
		rc.ServerName = strings.ToLower(rc.ServerName) // SNI is compared in lower case
		r.Routes = append(r.Routes, TLSRoute{TLSRoute: rc, Pool: pools[rc.Pool]})
	}
	r.Default = pools[lc.DefaultPool]
	return r
}

// Route is the pool for hello h: the first matching route's, or the
// default; nil when there is neither.
func (r *HelloRouter) Route(h *tlshello.Hello) *proxy.Pool {
	for i := range r.Routes {
		if rt := &r.Routes[i]; rt.Matches(h) {
			return rt.Pool
		}
	}
	return r.Default
}

// Close stops the pools' health checks.
func (r *HelloRouter) Close() error {
	for _, pl := range r.pools {
		pl.Close()
	}
	return nil
}

// Close reasons (splicer_connections_closed_total) of the connections
// refused for their hello.
const (
	ReasonBadHello = "bad_hello"       // not a well-formed ClientHello
	ReasonTooLarge = "hello_too_large" // not whole within tlshello.MaxBytes
	ReasonTimeout  = "hello_timeout"   // not whole within request_timeout
	ReasonNoRoute  = "no_route"        // no route matches, no default_pool
)

// RefusedHello is a connection closed for its hello, with why.
type RefusedHello struct {
	Reason string
	Err    error
}

func (e *RefusedHello) Error() string {
	return "TLS hello refused (" + e.Reason + "): " + e.Err.Error()
}
func (e *RefusedHello) Unwrap() error { return e.Err }

// CloseReason is the reason the pair is counted under (proxy.CloseReason).
func (e *RefusedHello) CloseReason() string { return e.Reason }

// alertUnrecognizedName is a fatal TLS alert, unrecognized_name (RFC
// 6066 section 3), in a plaintext record as a server sends it before its
// ServerHello: the client learns that the name is served nowhere here,
// rather than seeing the connection drop.
var alertUnrecognizedName = []byte{21, 3, 3, 0, 2, 2, 112}

// read reads the client's hello, within Timeout of accept, and picks its
// pool. It returns the bytes read, to be replayed to the server; a client
// that closes before sending anything gives io.EOF, one the hello is
// refused for a *RefusedHello.
func (r *HelloRouter) read(ctx context.Context, s proxy.Session) (*proxy.Pool, []byte, error) {
	c := s.Pair().Client
	if r.Timeout > 0 {
		c.SetReadDeadline(s.Pair().Created.Add(r.Timeout))
	}
	// Shutdown ends the wait: the pair is not spliced yet, so nothing
	// else would.
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	h, buf, err := tlshello.Read(c)
	stop()
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, nil, r.refused(ctx, s, buf, err)
	}
	pool := r.Route(h)
	log := s.Log()
	if log.Enabled(ctx, slog.LevelDebug) { // its arguments alone cost allocations
		name := "none"
		if pool != nil {
			name = pool.Name
		}
		log.Debug("TLS hello", "server_name", h.ServerName, "alpn", h.ALPN, "ech", h.ECH, "bytes", len(buf), "pool", name)
	}
	if pool == nil {
		c.Write(alertUnrecognizedName)
		return nil, nil, &RefusedHello{Reason: ReasonNoRoute, Err: errors.New("no route for server name " + quoteName(h.ServerName) + " and no default_pool")}
	}
	return pool, buf, nil
}

// refused classifies why no hello was read (the client sent buf), and
// logs it at debug: refusals are counted, and a flood of them must not
// flood the log.
func (r *HelloRouter) refused(ctx context.Context, s proxy.Session, buf []byte, err error) error {
	var he *tlshello.Error
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case len(buf) == 0 && errors.Is(err, io.ErrUnexpectedEOF):
		return io.EOF // a port check: connected and closed
	case errors.As(err, &he) && he.Reason == tlshello.ReasonTooLarge:
		err = &RefusedHello{Reason: ReasonTooLarge, Err: err}
	case errors.As(err, &he), errors.Is(err, io.ErrUnexpectedEOF):
		err = &RefusedHello{Reason: ReasonBadHello, Err: err}
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &RefusedHello{Reason: ReasonTimeout, Err: errors.New("the ClientHello was not whole within request_timeout (" + r.Timeout.String() + ")")}
	}
	s.Log().Debug("TLS hello refused", "err", err, "bytes", len(buf))
	return err
}

// quoteName is a server name for a message: quoted, or "(none)".
func quoteName(name string) string {
	if name == "" {
		return "(none)"
	}
	return `"` + name + `"`
}

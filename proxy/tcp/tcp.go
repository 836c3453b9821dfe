// Package tcp is the L4 proxy (class 1 in the papers): pick an upstream (round robin, least connections or a hash of the client's address), connect, splice both ways.
//
// With tls_routes, the listener binds late, as a content-aware switch:
// it reads the client's TLS ClientHello, picks a pool by the server name
// and ALPN protocols in it (HelloRouter), connects to a server of that
// pool, replays the hello to it and splices. TLS is never terminated, so
// the pair is spliced as any other, engine ip included.
package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// Proxy forwards every connection to one of its upstreams.
type Proxy struct {
	// Upstreams are the servers one is picked from for each client
	// connection, those that do not connect skipped for a while.
	Upstreams *proxy.Pool
	// Hello, if set, picks the pool for each connection by its TLS
	// ClientHello instead: Upstreams is not used.
	Hello *HelloRouter
	// IdleTimeout closes a pair when nothing moved for this long; 0 never.
	IdleTimeout time.Duration
	// SpliceAfter keeps the pair in control mode (the proxy copies) this
	// long before splicing; 0 splices at once.
	SpliceAfter time.Duration
	// ProxyProtocol ("v1", "v2" or empty) sends a PROXY protocol header to
	// the upstream before any client byte.
	ProxyProtocol string
}

// Serve implements proxy.Proxy: it dials the next upstream (trying the others
// in turn if it fails) and splices until both directions are closed.
func (p *Proxy) Serve(ctx context.Context, s proxy.Session) error {
	srv, err := p.connect(ctx, s)
	if errors.Is(err, io.EOF) {
		return nil // the client closed before its hello: a port check
	}
	if err != nil {
		return err
	}
	// least_conn counts the pair until it ends, which with ip may be
	// long after Serve returns.
	s.AtEnd(srv.Release)
	opts := engine.Both(p.IdleTimeout)
	if p.SpliceAfter > 0 {
		ctl := opts
		ctl.For = p.SpliceAfter
		r, err := s.Forward(ctx, ctl)
		if err != nil {
			return err
		}
		if !r.End.KeepsPair() {
			return proxy.EndErr(r)
		}
		opts = remainingAfter(opts, r)
	}
	r, err := s.Splice(ctx, opts)
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// connect picks the pool (Upstreams, or by the ClientHello with Hello),
// connects to the server it picks and sends what must come before the
// client's next bytes: the PROXY protocol header, if any, then the hello
// that was read. It returns the server, which holds the connection
// (Server.Release) until the pair ends.
func (p *Proxy) connect(ctx context.Context, s proxy.Session) (*proxy.Server, error) {
	pool, hello := p.Upstreams, []byte(nil)
	if p.Hello != nil {
		var err error
		if pool, hello, err = p.Hello.read(ctx, s); err != nil {
			return nil, err
		}
	}
	up, srv, err := p.dial(ctx, s, pool)
	if err != nil || len(hello) == 0 {
		return srv, err
	}
	n, err := up.Write(hello)
	s.Pair().AddBytes(engine.Up, int64(n))
	if err != nil {
		srv.Release()
		return nil, err
	}
	return srv, nil
}

// dial connects to the upstream pool picks (Pool.Dial) and sends the
// PROXY protocol header, if any.
func (p *Proxy) dial(ctx context.Context, s proxy.Session, pool *proxy.Pool) (*net.TCPConn, *proxy.Server, error) {
	up, srv, err := pool.Dial(ctx, s, proxy.AtReset)
	if err != nil {
		if ue := (*proxy.UpstreamsError)(nil); errors.As(err, &ue) && errors.Is(ue.Last(), proxy.ErrUpstreamReset) {
			// The last upstream took the connection and reset it: the
			// client learns it as over a direct connection, by a reset,
			// not by a clean end of an empty stream.
			engine.ArmReset(s.Pair().Client)
		}
		return nil, nil, err
	}
	if err := proxyproto.Send(p.ProxyProtocol, s.Pair(), up); err != nil {
		srv.Release()
		return nil, nil, err
	}
	return up, srv, nil
}

// Close ends the upstreams' health checks (io.Closer: the forwarder
// closes the proxy once no pair uses it).
func (p *Proxy) Close() error {
	if p.Hello != nil {
		return p.Hello.Close()
	}
	return p.Upstreams.Close()
}

// Pools implements proxy.PoolOwner: the upstream list, or the pools the
// hello picks from.
func (p *Proxy) Pools() []*proxy.Pool {
	if p.Hello != nil {
		return p.Hello.pools
	}
	return []*proxy.Pool{p.Upstreams}
}

// remainingAfter keeps forwarding directions that already saw EOF closed: a
// direction whose FIN was forwarded in control mode is held, not re-spliced.
func remainingAfter(opts engine.Options, r engine.Result) engine.Options {
	if r.EOF[engine.Up] {
		opts.Up.Mode = engine.Hold
	}
	if r.EOF[engine.Down] {
		opts.Down.Mode = engine.Hold
	}
	return opts
}

// Package all builds the proxy kind a listener is configured with.
package all

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/filter"
	"github.com/splicer/splicer/proxy/httpfwd"
	"github.com/splicer/splicer/proxy/httprev"
	"github.com/splicer/splicer/proxy/socks5"
	"github.com/splicer/splicer/proxy/tcp"
)

// Deps are what proxies may need beyond their configuration: a dialer that
// works where the forwarder runs (for background work such as health
// checks; per-pair connections go through Session.Dial) and a logger.
type Deps struct {
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  *slog.Logger
	// CopyBelow, if positive, replaces http-reverse's
	// httpcore.ReverseCopyBelow: the forwarder lowers it to the floor of
	// an engine of the listener's ladder that splices shorter bodies with
	// gain (engine.MinLimited, ip's min_body).
	CopyBelow int64
}

// New builds the proxy for lc. A proxy that holds background resources
// implements io.Closer; the forwarder closes it at shutdown.
func New(lc config.Listener, deps Deps) (proxy.Proxy, error) {
	switch lc.Proxy {
	case "tcp", "":
		p := &tcp.Proxy{IdleTimeout: lc.IdleTimeout.Std(), SpliceAfter: lc.SpliceAfter.Std(), ProxyProtocol: lc.ProxyProtocol}
		if lc.RoutesByHello() {
			p.Hello = tcp.NewHelloRouter(lc, deps.Dial, deps.Log)
		} else {
			p.Upstreams = upstreams(lc, deps)
		}
		return p, nil
	case "socks5":
		return socks5.FromConfig(lc)
	case "filter":
		return filter.FromConfig(lc, upstreams(lc, deps))
	case "http-forward":
		return httpfwd.New(lc), nil
	case "http-reverse":
		p, err := httprev.New(lc, deps.Dial, deps.Log)
		if err != nil {
			return nil, err
		}
		if deps.CopyBelow > 0 {
			p.CopyBelow = deps.CopyBelow
		}
		return p, nil
	}
	return nil, fmt.Errorf("proxy kind %q is not implemented", lc.Proxy)
}

// upstreams is the upstream list of a tcp or filter listener, its health
// checks started if it has them (and a dialer to run them).
func upstreams(lc config.Listener, deps Deps) *proxy.Pool {
	u := proxy.NewPool(lc.UpstreamList())
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u.StartChecks(proxy.CheckDialer(deps.Dial).SendingProxyHeader(lc.ProxyProtocol), log)
	return u
}

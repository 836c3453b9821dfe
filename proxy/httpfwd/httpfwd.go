// Package httpfwd is the forward web proxy (class 3 in the papers, the proxy of seed 002): CONNECT tunnels spliced both ways, GET with an absolute URI answered from a byte-bounded LRU cache or relayed with the response body spliced.
//
// For each request on a client connection:
//
//	CONNECT host:port   port in the allowlist: dial, answer 200, splice both
//	                    ways until the tunnel closes; otherwise 403
//	http://host/path    a fresh cached response: answered from memory, the
//	                    origin never sees the request; otherwise relayed to
//	                    host (one kept connection per origin at a time), the
//	                    response body spliced with a byte limit when its
//	                    length is known, streamed in control mode when
//	                    chunked, and kept in the cache when cacheable
//
// After a spliced body the proxy is in control mode again and reads the next
// request of a keep-alive connection.
package httpfwd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/httpcore"
)

// Proxy is an http-forward listener's proxy.
type Proxy struct {
	// ConnectPorts are the ports CONNECT may reach.
	ConnectPorts []int
	// Limits bound request heads.
	Limits httpcore.Limits
	// IdleTimeout bounds waiting for a request or a response and splices
	// in which nothing moves; 0 never times out.
	IdleTimeout time.Duration
	// Cache, if not nil, holds cacheable responses.
	Cache *Cache
	// ProxyProtocol ("v1", "v2" or "") is sent on every new upstream
	// connection, tunnels included.
	ProxyProtocol string
}

// New builds the proxy for a listener configured with proxy http-forward.
func New(lc config.Listener) *Proxy {
	h := lc.HTTP.WithDefaults()
	p := &Proxy{ConnectPorts: h.ConnectPorts, Limits: httpcore.LimitsFrom(h), IdleTimeout: lc.IdleTimeout.Std(),
		ProxyProtocol: lc.ProxyProtocol}
	if *h.CacheBytes > 0 {
		p.Cache = NewCache(int64(*h.CacheBytes))
	}
	return p
}

// Serve implements proxy.Proxy.
func (p *Proxy) Serve(ctx context.Context, s proxy.Session) error {
	c := httpcore.NewConn(s, p.Limits, p.IdleTimeout)
	c.ProxyProtocol = p.ProxyProtocol
	return httpcore.Serve(ctx, c, func(ctx context.Context, req *http.Request) (bool, error) {
		if req.Method == http.MethodConnect {
			return false, p.connect(ctx, c, req)
		}
		return p.get(ctx, c, req)
	})
}

// connect opens a tunnel to an allowed port and splices it both ways.
func (p *Proxy) connect(ctx context.Context, c *httpcore.Conn, req *http.Request) error {
	_, portStr, err := net.SplitHostPort(req.Host)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		return httpcore.Errorf(http.StatusBadRequest, "CONNECT needs host:port, got %q", req.Host)
	}
	if !slices.Contains(p.ConnectPorts, port) {
		return httpcore.Errorf(http.StatusForbidden, "CONNECT to port %d is not allowed (allowed: %v)", port, p.ConnectPorts)
	}
	// A tunnel never shares a connection kept for plain requests.
	if err := c.Use(ctx, "CONNECT "+req.Host, dialer(c.S, req.Host), nil); err != nil {
		return httpcore.UpstreamError(err)
	}
	c.S.Log().Debug("tunnel", "target", req.Host)
	c.Record(http.StatusOK)
	if err := c.WriteResponse([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return err
	}
	// A client may send its first tunnel bytes (a TLS ClientHello) without
	// waiting for the 200; what the head reader holds of them goes first.
	if early := c.ClientBuffered(); len(early) > 0 {
		if err := c.WriteUp(early); err != nil {
			return err
		}
	}
	r, err := c.Splice(ctx, engine.Both(p.IdleTimeout))
	if err != nil {
		return err
	}
	return proxy.EndErr(r)
}

// get relays a request with an absolute http URI, through the cache.
func (p *Proxy) get(ctx context.Context, c *httpcore.Conn, req *http.Request) (bool, error) {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		return false, httpcore.Errorf(http.StatusBadRequest, "a forward proxy needs an absolute http:// URI or CONNECT, got %q", req.RequestURI)
	}
	cacheable := p.Cache != nil && requestCacheable(req)
	if cacheable {
		if e, ok := p.Cache.get(cacheKey(req)); ok {
			c.S.Log().Debug("cache hit", "url", req.URL.String())
			err := c.WriteResponse(hitResponse(req, e, time.Now()))
			c.Record(http.StatusOK) // the cache keeps 200 responses only
			return !req.Close, err
		}
	}
	target := httpcore.HostPort(req.URL.Host, 80)
	dial := dialer(c.S, target)
	if err := c.Use(ctx, target, dial, nil); err != nil {
		return false, httpcore.UpstreamError(err)
	}
	resp, err := c.RoundTrip(ctx, req, dial)
	if err != nil {
		return false, httpcore.UpstreamError(err)
	}
	now := time.Now()
	var ttl time.Duration
	var capture, reserved int64
	if cacheable {
		// A body that does not fit beside the captures in flight is
		// relayed without a copy (spliced), not cached.
		if ttl = lifetime(req, resp, now); ttl > 0 && p.Cache.reserve(resp.ContentLength) {
			capture, reserved = p.Cache.MaxEntry(), resp.ContentLength
			defer func() { p.Cache.release(reserved) }()
		}
	}
	c.S.Log().Debug("relay", "method", req.Method, "url", req.URL.String(), "status", resp.StatusCode, "length", resp.ContentLength)
	keep, body, err := c.Relay(ctx, req, resp, capture)
	if err == nil && body != nil {
		p.Cache.release(reserved) // the entry takes the reservation's place
		reserved = 0
		h := resp.Header.Clone()
		httpcore.StripHopByHop(h)
		p.Cache.put(&entry{key: cacheKey(req), header: h, body: body, stored: now, expires: now.Add(ttl)})
	}
	return keep, err
}

// dialer dials addr through the session, making it the pair's upstream.
func dialer(s proxy.Session, addr string) httpcore.Dialer {
	return func(ctx context.Context) (*net.TCPConn, error) { return s.Dial(ctx, addr) }
}

// hitResponse is the whole response to req from cache entry e, with its age.
func hitResponse(req *http.Request, e *entry, now time.Time) []byte {
	h := e.header.Clone()
	h.Set("Content-Length", strconv.Itoa(len(e.body)))
	h.Set("Age", strconv.Itoa(int(now.Sub(e.stored).Seconds())))
	h.Set("X-Cache", "HIT")
	switch {
	case req.Close:
		h.Set("Connection", "close")
	case req.ProtoMinor == 0:
		h.Set("Connection", "keep-alive")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\n")
	h.Write(&b)
	b.WriteString("\r\n")
	b.Write(e.body)
	return b.Bytes()
}

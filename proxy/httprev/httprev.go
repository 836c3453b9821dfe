// Package httprev is the reverse proxy, the content-aware switch of seed 003: each request is routed on Host and path to a pool of back-ends, balanced, and its response body spliced.
//
// Binding is delayed and per request: the proxy reads a request head in
// control mode, picks the route (the first whose host and path rule match),
// picks a healthy server of the route's pool (round_robin, least_conn, or
// consistent_hash on the client's IP address), adds Forwarded and
// X-Forwarded-For, passes on the client's X-Request-ID or adds one, sends
// the request and splices the response body with a
// byte limit. The next request on the same keep-alive client connection may
// go to another server; the proxy keeps the upstream connection while
// successive requests go to the same server. When they do not, or when the
// client connection ends, an upstream connection whose last response
// completed cleanly goes to the listener's pool of idle connections
// (upstream_pool), where any client connection's request to that server
// takes it instead of dialling (HAProxy's http-reuse safe).
//
// Pools with a health_check are probed in the background (GET path every
// interval); a server that fails is skipped until it passes again. Close
// stops the probes.
package httprev

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/splicer/splicer/internal/acl"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/httpcore"
)

// Proxy is an http-reverse listener's proxy.
type Proxy struct {
	// Routes are tried in order; the first match picks the pool.
	Routes []Route
	// Limits bound request heads.
	Limits httpcore.Limits
	// IdleTimeout bounds waiting for a request or a response and splices
	// in which nothing moves; 0 never times out.
	IdleTimeout time.Duration
	// ProxyProtocol ("v1", "v2" or "") is sent on every new back-end
	// connection, with the client's address.
	ProxyProtocol string
	// Trusted are the clients (other proxies) whose Forwarded and
	// X-Forwarded-* fields are kept and appended to; anyone else's are
	// replaced.
	Trusted acl.Prefixes
	// CopyBelow is the largest response body the proxy copies itself
	// instead of splicing it (httpcore.Conn.CopyBelow); New sets
	// httpcore.ReverseCopyBelow, the forwarder lowers it to the floor of
	// an engine that splices shorter bodies with gain (ip's min_body).
	CopyBelow int64
	// Idle holds idle upstream connections for every client connection
	// to reuse, keyed by server address; nil keeps each upstream
	// connection private to its client connection (no pool, or a PROXY
	// protocol header, which names one client).
	Idle *httpcore.UpstreamPool
	// tls, if not nil, terminates TLS on the client side: its bytes are
	// decrypted in user space, and no body is spliced.
	tls *terminator
	// upTLS are the TLS configurations of the servers of pools with a
	// tls section; empty when none has one.
	upTLS upstreamTLS

	// pools are the listener's pools, each once, in configuration order.
	pools []*proxy.Pool
}

// Route sends requests that match Host and one path rule to Pool.
type Route struct {
	config.Route
	Pool *proxy.Pool
}

// Matches reports whether a request for host and path takes this route.
// Host is compared without its port and case; an empty rule matches all.
func (r *Route) Matches(host, path string) bool {
	if r.Host != "" && !strings.EqualFold(stripPort(host), r.Host) {
		return false
	}
	switch {
	case r.Path != "":
		return path == r.Path
	case r.PathPrefix != "":
		return strings.HasPrefix(path, r.PathPrefix)
	case r.PathSuffix != "":
		return strings.HasSuffix(path, r.PathSuffix)
	}
	return true
}

func stripPort(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// New builds the proxy for a listener configured with proxy http-reverse and
// starts the health checks of its pools, dialling with dial. It fails
// when the listener's TLS certificates cannot be read.
func New(lc config.Listener, dial proxy.CheckDialer, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := lc.HTTP.WithDefaults()
	p := &Proxy{Limits: httpcore.LimitsFrom(h), IdleTimeout: lc.IdleTimeout.Std(), ProxyProtocol: lc.ProxyProtocol,
		CopyBelow: httpcore.ReverseCopyBelow}
	if lc.TLS != nil {
		t, err := newTerminator(lc.TLS)
		if err != nil {
			return nil, err
		}
		p.tls = t
	}
	ut, err := newUpstreamTLS(lc.Pools)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.upTLS = ut
	p.Trusted, _ = acl.ParsePrefixes(h.TrustedProxies) // validated with the configuration
	if up := lc.UpstreamPool.WithDefaults(); *up.MaxIdlePerServer > 0 && p.ProxyProtocol == "" {
		p.Idle = httpcore.NewUpstreamPool(*up.MaxIdlePerServer, up.IdleTimeout.Std())
	}
	pools := map[string]*proxy.Pool{}
	for _, pc := range lc.Pools {
		pl := proxy.NewPool(pc)
		pl.StartChecks(ut.checkDialer(pl, dial.SendingProxyHeader(lc.ProxyProtocol)), log)
		pools[pc.Name] = pl
		p.pools = append(p.pools, pl)
	}
	for _, rc := range lc.Routes {
		p.Routes = append(p.Routes, Route{Route: rc, Pool: pools[rc.Pool]})
	}
	return p, nil
}

// ReloadFiles implements proxy.FileReloader: the TLS certificates are
// read again, for new connections; none without TLS.
func (p *Proxy) ReloadFiles() (commit func(), err error) {
	if p.tls == nil {
		return func() {}, nil
	}
	return p.tls.reload()
}

// Pools implements proxy.PoolOwner: the listener's pools, in
// configuration order.
func (p *Proxy) Pools() []*proxy.Pool { return p.pools }

// UpstreamPool implements proxy.PoolReporter: the pool's counters by
// server, none without a pool.
func (p *Proxy) UpstreamPool() []proxy.PoolStats {
	if p.Idle == nil {
		return nil
	}
	at := map[string]int{} // index in out
	var out []proxy.PoolStats
	for _, st := range p.Idle.Stats() {
		server, _, _ := strings.Cut(st.Key, " ") // without the class
		i, ok := at[server]
		if !ok {
			i = len(out)
			at[server] = i
			out = append(out, proxy.PoolStats{Server: server})
		}
		ps := &out[i]
		ps.Hits += st.Hits
		ps.Misses += st.Misses
		ps.Stale += st.Stale
		ps.Idle += st.Idle
	}
	return out
}

// Close stops the health checks and closes the idle upstream connections.
func (p *Proxy) Close() error {
	for _, pl := range p.pools {
		pl.Close()
	}
	if p.Idle != nil {
		p.Idle.Close()
	}
	if p.tls != nil {
		p.tls.close()
	}
	return nil
}

// Serve implements proxy.Proxy.
func (p *Proxy) Serve(ctx context.Context, s proxy.Session) error {
	var c *httpcore.Conn
	proto := "http"
	if p.tls != nil {
		// The handshake is part of the first request's wait: both are
		// done within request_timeout of accept.
		var by time.Time
		if p.Limits.RequestTimeout > 0 {
			by = s.Pair().Created.Add(p.Limits.RequestTimeout)
		}
		tc, err := p.tls.handshake(ctx, s, by)
		if err != nil {
			return err
		}
		defer p.tls.closeNotify(s, tc)
		c, proto = httpcore.NewConnOn(s, tc, p.Limits, p.IdleTimeout), "https"
	} else {
		c = httpcore.NewConn(s, p.Limits, p.IdleTimeout)
	}
	c.ProxyProtocol, c.CopyBelow = p.ProxyProtocol, p.CopyBelow
	c.Pool, c.Class = p.Idle, proxy.DialClass(s)
	if p.upTLS.any() {
		c.UpstreamTLS = p.upTLS.config
	}
	c.Reuse()               // handle keeps no request or response past its exchange
	fwd := takeForwarding() // the forwarding fields' values, each request's in turn
	defer fwd.release()
	fwd.proto = proto
	return httpcore.Serve(ctx, c, func(ctx context.Context, req *http.Request) (bool, error) {
		return p.handle(ctx, c, req, fwd)
	})
}

// handle routes one request, relays it and its response. fwd holds the
// forwarding fields' values while the request lives. A request that can
// be sent again (httpcore.Retryable) goes to the pool's next server when
// its server does not answer, as nginx's proxy_next_upstream does, each
// server once; the client sees the last failure only when none answers.
func (p *Proxy) handle(ctx context.Context, c *httpcore.Conn, req *http.Request, fwd *forwarding) (bool, error) {
	rt := p.route(req)
	if rt == nil {
		return false, httpcore.Errorf(http.StatusNotFound, "no route for host %q path %q", req.Host, req.URL.Path)
	}
	if err := addForwarded(req, c.ClientIP(), p.trusts(c.ClientIP()), fwd); err != nil {
		return false, err
	}
	c.SetRequestID(req)
	tried := map[*proxy.Server]bool{} // servers that failed this request
	var unanswered error              // the last server's failure to answer
	for {
		srv, err := p.connect(ctx, c, rt.Pool, hashKey(rt.Pool, req, c.ClientIP()), tried)
		if err != nil {
			if unanswered != nil {
				return false, httpcore.UpstreamError(unanswered)
			}
			return false, err
		}
		resp, err := c.RoundTrip(ctx, req, dialer(c.S, srv.Addr))
		if err == nil {
			rt.Pool.Succeeded(srv)
			return p.relay(ctx, c, req, resp, rt, srv)
		}
		if !c.UpstreamFailed() || ctx.Err() != nil {
			return false, httpcore.UpstreamError(err)
		}
		rt.Pool.Failed(srv, c.S.Log())
		if !httpcore.Retryable(req) {
			return false, httpcore.UpstreamError(err)
		}
		c.S.Log().Warn("back-end did not answer: the request goes to the next server", "pool", rt.Pool.Name, "server", srv.Addr, "err", err)
		c.Close() // broken under the request: closed, never kept
		tried[srv], unanswered = true, err
	}
}

// relay sends the response srv gave to req on to the client.
func (p *Proxy) relay(ctx context.Context, c *httpcore.Conn, req *http.Request, resp *http.Response, rt *Route, srv *proxy.Server) (bool, error) {
	if log := c.S.Log(); log.Enabled(ctx, slog.LevelDebug) { // its arguments alone cost allocations
		log.Debug("relay", "method", req.Method, "host", req.Host, "path", req.URL.Path,
			"pool", rt.Pool.Name, "server", srv.Addr, "status", resp.StatusCode, "length", resp.ContentLength)
	}
	keep, _, err := c.Relay(ctx, req, resp, 0)
	return keep, err
}

func (p *Proxy) route(req *http.Request) *Route {
	for i := range p.Routes {
		if r := &p.Routes[i]; r.Matches(req.Host, req.URL.Path) {
			return r
		}
	}
	return nil
}

// connect makes a server of pool the current upstream, trying the next
// pick when one cannot be reached: 503 when no server is healthy, 502 when
// none of the healthy ones connects. failed holds the servers that failed
// the request already, and takes those that do not connect.
func (p *Proxy) connect(ctx context.Context, c *httpcore.Conn, pool *proxy.Pool, key string, failed map[*proxy.Server]bool) (*proxy.Server, error) {
	var lastErr error
	var queued time.Time
	for {
		srv := pool.Pick(key, failed)
		if srv == nil {
			if lastErr != nil {
				return nil, httpcore.UpstreamError(lastErr)
			}
			again, err := pool.WaitForPlace(ctx, &queued, failed, proxy.Waiter{Conn: c.S.Pair().Client, Leaving: proxy.AtClose})
			if err != nil {
				return nil, err
			}
			if again {
				continue
			}
			return nil, httpcore.Errorf(http.StatusServiceUnavailable, "no server in pool %s to pick: each failed its health check, is drained or is full (max_conns, past queue_timeout)", pool.Name)
		}
		if !srv.Hold() {
			continue // full since Pick looked: the next Pick sees it full
		}
		// The kept connection, if it goes to srv, takes the place (Use).
		err := c.Use(ctx, p.upTLS.key(pool.Name, srv), dialer(c.S, srv.Addr), srv)
		if err == nil {
			return srv, nil // answered once the response head comes (handle)
		}
		if ctx.Err() == nil {
			pool.Failed(srv, c.S.Log())
		}
		c.S.Log().Warn("back-end connect failed", "pool", pool.Name, "server", srv.Addr, "err", err)
		failed[srv], lastErr = true, err
	}
}

// hashKey is what the pool's consistent_hash hashes for req from
// clientIP (Pool.HashOn): the client's address, the request's URI, or a
// header field's value (the client's address when the field is absent).
// Other balances hash nothing.
func hashKey(pool *proxy.Pool, req *http.Request, clientIP string) string {
	if pool.Balance != "consistent_hash" {
		return ""
	}
	switch on := pool.HashOn; {
	case on == "uri":
		return req.URL.RequestURI()
	case strings.HasPrefix(on, "header:"):
		if v := req.Header.Get(on[len("header:"):]); v != "" {
			return v
		}
	}
	return clientIP
}

// dialer dials addr through the session, making it the pair's upstream.
func dialer(s proxy.Session, addr string) httpcore.Dialer {
	return func(ctx context.Context) (*net.TCPConn, error) { return s.Dial(ctx, addr) }
}

// trusts reports whether the client at ip is a trusted proxy.
func (p *Proxy) trusts(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && p.Trusted.Contains(a)
}

// addForwarded tells the back-end who the client is (RFC 7239 Forwarded and
// the older X-Forwarded-For), appending to what a trusted earlier proxy
// said; an untrusted client's own forwarding fields are dropped, so it
// cannot pass itself off as someone else. The host goes into Forwarded as
// a quoted string, escaped (ReadRequest checked it already: this is the
// second wall); one that no quoted string can carry (a control
// character) is refused with 400. The three fields' values are kept in
// fw, which must outlive the request.
func addForwarded(req *http.Request, clientIP string, trusted bool, fw *forwarding) error {
	h := req.Header
	if !trusted {
		for _, name := range forwardingFields {
			delete(h, name) // canonical names: what h.Del does
		}
	}
	fwd, ok := fw.forwarded(clientIP, req.Host)
	if !ok {
		return httpcore.Errorf(http.StatusBadRequest, "host %q cannot be carried in Forwarded", req.Host)
	}
	v := &fw.values
	v[0], v[1], v[2] = appended(h, "Forwarded", fwd), appended(h, "X-Forwarded-For", clientIP), fw.scheme()
	h["Forwarded"], h["X-Forwarded-For"], h["X-Forwarded-Proto"] = v[0:1:1], v[1:2:2], v[2:3:3]
	return nil
}

// forwarding is a client connection's memory for the forwarding fields it
// adds to each request in turn: one array for the three values, and the
// text of the Forwarded value, rewritten for each request (as the heads'
// are, see httpcore.Conn.Reuse). With them a request costs no allocation
// of its own, and so no share of a garbage collection.
type forwarding struct {
	values [3]string
	text   []byte
	// proto is how the client reached the proxy: "http" (or ""), or
	// "https" through TLS the proxy terminated.
	proto string
}

// forwardings keeps the forwarding memory of ended client connections
// for new ones: a client that opens a connection per request would
// otherwise grow a new text for each request.
var forwardings = sync.Pool{New: func() any { return new(forwarding) }}

// takeForwarding returns a client connection's forwarding memory, its
// proto unset.
func takeForwarding() *forwarding { return forwardings.Get().(*forwarding) }

// release gives fw back to forwardings once its connection's requests
// are done; a text grown by an unusual host is not kept.
func (fw *forwarding) release() {
	text := fw.text[:0]
	if cap(text) > 1<<10 {
		text = nil
	}
	*fw = forwarding{text: text}
	forwardings.Put(fw)
}

// scheme is the proto parameter's value: fw.proto, "http" when unset.
func (fw *forwarding) scheme() string {
	if fw.proto == "" {
		return "http"
	}
	return fw.proto
}

// forwarded returns the Forwarded element for a client at clientIP that
// asked for host ("" when it named none), in fw's text; false when a
// value cannot be written as a quoted string (RFC 7239 section 4).
func (fw *forwarding) forwarded(clientIP, host string) (string, bool) {
	b := append(fw.text[:0], "for="...)
	ok := true
	switch {
	case strings.Contains(clientIP, ":"): // an IPv6 node, quoted and bracketed
		b, ok = appendQuoted(append(b, `"[`...), clientIP)
		b = append(b, `]"`...)
	case isToken(clientIP): // an IPv4 address
		b = append(b, clientIP...)
	default:
		b, ok = appendQuoted(append(b, '"'), clientIP)
		b = append(b, '"')
	}
	b = append(append(b, ";proto="...), fw.scheme()...)
	if host != "" && ok {
		b, ok = appendQuoted(append(b, `;host="`...), host)
		b = append(b, '"')
	}
	fw.text = b
	return unsafe.String(unsafe.SliceData(b), len(b)), ok
}

// appendQuoted appends s as the inside of an RFC 9110 quoted-string: '"'
// and '\' escaped with '\'. It reports false, having appended what came
// before, when s holds a control character other than HTAB, which no
// quoted-string can carry.
func appendQuoted(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < ' ' && c != '\t' || c == 0x7f:
			return b, false
		default:
			b = append(b, c)
		}
	}
	return b, true
}

// isToken reports whether s is an RFC 9110 token: a parameter value that
// needs no quotes.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// forwardingFields are the fields an untrusted client's request loses
// (canonical names): those the proxy sets, and the others that back ends
// and their frameworks take for the client's address or the port and
// host it asked for (nginx's real_ip module, Cloudflare's and Akamai's
// True-Client-IP, Rails' and Express's client address), which a client
// could otherwise set to pass itself off as someone else.
var forwardingFields = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
	"X-Forwarded-Port", "X-Forwarded-Server", "X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "X-Cluster-Client-Ip"}

// appended is value after what earlier proxies said in h's field name.
func appended(h http.Header, name, value string) string {
	if prior := h[name]; len(prior) > 0 {
		return strings.Join(prior, ", ") + ", " + value
	}
	return value
}

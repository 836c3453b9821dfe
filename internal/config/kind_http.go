// The http section (http-forward, http-reverse, filter) and http-reverse's routes and pools.

package config

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/splicer/splicer/internal/acl"
)

func init() {
	// The HTTP kinds are implemented (proxy/httpfwd, proxy/httprev).
	ProxyKinds = append(ProxyKinds, "http-forward", "http-reverse")
}

// HTTP configures the HTTP proxies' limits and cache. A key left out (or 0)
// takes the default that WithDefaults fills in; cache_bytes: 0 disables the
// cache, which is why it is a pointer.
type HTTP struct {
	// ConnectPorts are the ports CONNECT may reach (http-forward); default [443].
	ConnectPorts []int `yaml:"connect_ports"`
	// HeaderTimeout bounds reading a request head once its first byte
	// arrived (slowloris); default 10s.
	HeaderTimeout Duration `yaml:"header_timeout"`
	// RequestTimeout bounds the wait, from accept, for the first request's
	// whole head: a connection that sends nothing is closed then, so
	// silent connections cannot hold max_connections; default 10s.
	RequestTimeout Duration `yaml:"request_timeout"`
	// BodyTimeout bounds each wait for more of a request body: a client
	// that sends nothing of its body for this long (a stalled upload, a
	// slow-POST attack) gets 408 and the connection closes, and with it
	// the upstream connection the body was going to; default 60s, as
	// nginx's client_body_timeout. idle_timeout, if shorter, wins.
	BodyTimeout Duration `yaml:"body_timeout"`
	// BodyMinRate bounds a request body's whole time, in bytes per second
	// (Apache's mod_reqtimeout MinRate): after a grace of body_timeout
	// from its start, each byte that came buys 1/BodyMinRate second more,
	// and a body that falls behind gets 408. body_timeout alone bounds
	// each wait, so a client that trickled a byte just within it held
	// the connection, and the upstream one, for as long as it liked.
	// Default 500 (Apache's); http-forward and http-reverse.
	BodyMinRate Size `yaml:"body_min_rate"`
	// ResponseTimeout bounds each wait for the upstream once a request is
	// sent: for the response head (504 when it does not come: a hung
	// server) and for more of the response body (the pair closes: its
	// head is out); and each wait for a client that takes nothing of its
	// response (the pair closes); default 60s, as nginx's
	// proxy_read_timeout and send_timeout. idle_timeout, if shorter, wins.
	ResponseTimeout Duration `yaml:"response_timeout"`
	// KeepaliveTimeout bounds the wait for the next request on a
	// keep-alive connection: an idle client connection, and the upstream
	// connection it keeps, are closed then; default 75s, as nginx's
	// keepalive_timeout (not tcp_keepalive, which probes a quiet peer).
	// idle_timeout, if shorter, wins.
	KeepaliveTimeout Duration `yaml:"keepalive_timeout"`
	// MaxHeaderBytes bounds a request head (request line and headers);
	// default 32KiB. MaxHeaders bounds its header lines; default 100.
	MaxHeaderBytes Size `yaml:"max_header_bytes"`
	MaxHeaders     int  `yaml:"max_headers"`
	// MaxBodyBytes bounds a request body (nginx's client_max_body_size):
	// one whose Content-Length is larger gets 413 before any upstream
	// hears of it; a chunked one that grows past it gets 413 when it
	// does, and the upstream connection, which had part of it, is
	// closed. Default 0: no bound, as in HAProxy and Envoy, since the
	// bodies are streamed and spliced, never held.
	MaxBodyBytes Size `yaml:"max_body_bytes"`
	// TrustedProxies are client CIDRs (other proxies in front) whose
	// Forwarded and X-Forwarded-* fields http-reverse keeps and appends
	// to; everyone else's are replaced.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// CacheBytes bounds the in-memory response cache (http-forward);
	// default 64MiB, 0 disables it.
	CacheBytes *Size `yaml:"cache_bytes"`
}

// Defaults of the http section's keys.
const (
	DefaultHTTPHeaderTimeout    = 10 * time.Second
	DefaultHTTPRequestTimeout   = 10 * time.Second
	DefaultHTTPBodyTimeout      = 60 * time.Second
	DefaultHTTPBodyMinRate      = 500
	DefaultHTTPResponseTimeout  = 60 * time.Second
	DefaultHTTPKeepaliveTimeout = 75 * time.Second
	DefaultHTTPMaxHeaderBytes   = 32 << 10
	DefaultHTTPMaxHeaders       = 100
	DefaultHTTPCacheBytes       = 64 << 20
)

// maxBodyMinRate bounds body_min_rate: a floor above a link's speed would
// refuse every body of more than a few seconds.
const maxBodyMinRate Size = 1 << 30

// WithDefaults returns h (which may be nil: no http section) with every key
// left out set to its default.
func (h *HTTP) WithDefaults() HTTP {
	var out HTTP
	if h != nil {
		out = *h
	}
	if len(out.ConnectPorts) == 0 {
		out.ConnectPorts = []int{443}
	}
	if out.HeaderTimeout == 0 {
		out.HeaderTimeout = Duration(DefaultHTTPHeaderTimeout)
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = Duration(DefaultHTTPRequestTimeout)
	}
	if out.BodyTimeout == 0 {
		out.BodyTimeout = Duration(DefaultHTTPBodyTimeout)
	}
	if out.BodyMinRate == 0 {
		out.BodyMinRate = DefaultHTTPBodyMinRate
	}
	if out.ResponseTimeout == 0 {
		out.ResponseTimeout = Duration(DefaultHTTPResponseTimeout)
	}
	if out.KeepaliveTimeout == 0 {
		out.KeepaliveTimeout = Duration(DefaultHTTPKeepaliveTimeout)
	}
	if out.MaxHeaderBytes == 0 {
		out.MaxHeaderBytes = DefaultHTTPMaxHeaderBytes
	}
	if out.MaxHeaders == 0 {
		out.MaxHeaders = DefaultHTTPMaxHeaders
	}
	if out.CacheBytes == nil {
		n := Size(DefaultHTTPCacheBytes)
		out.CacheBytes = &n
	}
	return out
}

// Route sends requests matching Host and a path rule to a pool
// (http-reverse). An empty Host matches any host; at most one of Path
// (exact), PathPrefix and PathSuffix may be set, none matches any path.
type Route struct {
	Host       string `yaml:"host"`
	Path       string `yaml:"path"`
	PathPrefix string `yaml:"path_prefix"`
	PathSuffix string `yaml:"path_suffix"`
	Pool       string `yaml:"pool"`
}

// Pool is a group of back-ends and how to pick one (http-reverse).
type Pool struct {
	Name string `yaml:"name"`
	// Balance is one of Balances; default round_robin.
	Balance string `yaml:"balance"`
	// HashOn is what consistent_hash hashes for a request: "client_ip"
	// (the default: a client keeps its server), "uri" (path and query,
	// nginx's hash $request_uri, HAProxy's balance uri: each object
	// stays on one cache server), or "header:NAME" (HAProxy's balance
	// hdr(NAME); a request without the field hashes its client's address).
	HashOn      string       `yaml:"hash_on,omitempty"`
	Servers     []PoolServer `yaml:"servers"`
	HealthCheck *HealthCheck `yaml:"health_check"`
	// MaxFails and FailTimeout skip a server that does not connect, as
	// the listener's keys do for an upstream list (FailPolicy), or does
	// not answer a request (no valid response head: closed, reset,
	// response_timeout).
	MaxFails    *int     `yaml:"max_fails"`
	FailTimeout Duration `yaml:"fail_timeout"`
	// QueueTimeout: with every usable server full (max_conns), a request
	// waits this long for one to free a place before it is answered 503
	// (HAProxy's timeout queue); left out, at once (nginx's max_conns).
	QueueTimeout Duration `yaml:"queue_timeout,omitempty"`
	// MaxQueue bounds the requests that wait at once in that queue: one
	// more is answered 503 at once (HAProxy's maxqueue, nginx's queue
	// size); 0, no bound.
	MaxQueue int `yaml:"max_queue,omitempty"`
	// Resolver says how and how often the servers marked resolve (or
	// given by srv) are looked up; nil: the defaults.
	Resolver *Resolver `yaml:"resolver,omitempty"`
	// TLS, if set, has the proxy speak TLS to the pool's servers.
	TLS *UpstreamTLS `yaml:"tls,omitempty"`
}

// PoolServer is one server of a pool: its host:port and its share of the
// requests. Written as "host:port" alone, its weight is 1.
type PoolServer struct {
	Address string `yaml:"address"`
	// Weight is the server's share against the pool's other servers
	// (HAProxy's and nginx's weight): 3 takes three times the requests
	// of 1 under round_robin, three times the connections under
	// least_conn, three times the clients under consistent_hash; 0 takes
	// none (a server being drained). Default 1, at most MaxWeight.
	Weight int `yaml:"weight"`
	// Backup servers are picked only when no other server can be: each
	// other one failed its health check, is drained, or is skipped for
	// failures (nginx's and HAProxy's backup).
	Backup bool `yaml:"backup,omitempty"`
	// MaxConns bounds the connections the server carries at once (tcp
	// and filter: client connections; http-reverse: requests in flight,
	// a connection kept idle between requests giving its place back), as
	// nginx's max_conns and HAProxy's maxconn: a full server is passed
	// over, and with every server full a client waits up to the pool's
	// QueueTimeout, then is refused (503; tcp closes). 0: no bound.
	MaxConns int `yaml:"max_conns,omitempty"`
	// Resolve makes a server given by name a group, as nginx's resolve
	// parameter and HAProxy's server-template do: the name is looked up
	// again every resolver interval, and each of its A and AAAA addresses
	// is a server of its own, with the entry's weight, backup and
	// max_conns, its own health checks and failures. Without it, a name
	// is one server, resolved by each connect.
	Resolve bool `yaml:"resolve,omitempty"`
	// SRV, instead of Address, names a DNS SRV record
	// (_service._proto.name) looked up as Resolve does: each target's
	// addresses at the record's port, weighted by the record's weight
	// (1 to MaxWeight) times the entry's; targets of the lowest priority
	// are the primary servers, the others backups.
	SRV string `yaml:"srv,omitempty"`
}

// DefaultWeight and MaxWeight bound a pool server's weight.
const (
	DefaultWeight = 1
	MaxWeight     = 256
)

// maxMaxConns bounds a server's max_conns: more is no bound in practice.
const maxMaxConns = 1 << 24

func (s *PoolServer) setDefaults()        { s.Weight = DefaultWeight }
func (s *PoolServer) fromScalar(a string) { s.Address = a }

// MarshalYAML writes a server of weight 1 as its address alone.
func (s PoolServer) MarshalYAML() (any, error) {
	if s.Weight == DefaultWeight && !s.Backup && s.MaxConns == 0 && !s.Resolve && s.SRV == "" {
		return s.Address, nil
	}
	type plain PoolServer
	return plain(s), nil
}

// Servers are pool servers of weight 1 at addrs.
func Servers(addrs ...string) []PoolServer {
	out := make([]PoolServer, len(addrs))
	for i, a := range addrs {
		out[i] = PoolServer{Address: a, Weight: DefaultWeight}
	}
	return out
}

// HealthCheck is an active health check of a pool's servers (or a
// listener's upstream list): GET Path every Interval; a server that does
// not answer 2xx or 3xx within Timeout is skipped until it does again. A
// listener's may leave Path out: a connect within Timeout passes.
type HealthCheck struct {
	Path string `yaml:"path"`
	// Host is the Host field of the GET (HAProxy's http-check send hdr
	// Host): a server that serves names picks the one checked. Default:
	// the server's own host:port.
	Host     string   `yaml:"host,omitempty"`
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
	// Fall is how many checks in a row a healthy server must fail to be
	// marked unhealthy, Rise how many in a row an unhealthy one must pass
	// to be healthy again (HAProxy's fall and rise, Envoy's unhealthy and
	// healthy thresholds): more than 1 keeps one lost probe from taking a
	// server out. Default 1 each (left out: 0).
	Fall int `yaml:"fall,omitempty"`
	Rise int `yaml:"rise,omitempty"`
}

// Thresholds are the check's fall and rise, their defaults filled in.
func (hc HealthCheck) Thresholds() (fall, rise int) {
	return max(hc.Fall, 1), max(hc.Rise, 1)
}

// maxThreshold bounds fall and rise: more would take a server out, or
// back in, only after minutes of checks.
const maxThreshold = 100

// UpstreamPool bounds the idle keep-alive connections http-reverse keeps to
// each server for any client connection to reuse (HAProxy's http-reuse
// safe). A key left out takes its default (an idle_timeout of 0 written
// in a file is refused);
// max_idle_per_server: 0 turns the pool off, which is why it is a pointer.
type UpstreamPool struct {
	// MaxIdlePerServer bounds the idle connections kept per server; the
	// oldest is closed to make room. Default 64.
	MaxIdlePerServer *int `yaml:"max_idle_per_server"`
	// IdleTimeout closes a connection idle this long. Default 4s: below
	// the 5 s keep-alive timeout of Apache and Node.js, so the pool lets a
	// connection go before the server closes it under a request.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// ReceiveBuffer bounds each upstream connection's receive buffer
	// (SO_RCVBUF, as the kernel reports it), and with it the window its
	// server may fill; 0 leaves it to the kernel's autotuning (up to
	// net.ipv4.tcp_rmem's maximum). Unset: DefaultPoolReceiveBuffer
	// where engine ip may splice the bodies (engine auto or ip), else 0.
	// A body spliced by ip keeps the window the forwarder gave its
	// server, and a pooled connection's grows on earlier responses past
	// what a new client connection takes: the server then sends what
	// the client refuses (engine ip refuses such a splice: windowsFit).
	ReceiveBuffer *Size `yaml:"receive_buffer"`
}

// Defaults of the upstream_pool section's keys, and the bound on
// max_idle_per_server.
const (
	DefaultPoolMaxIdlePerServer = 64
	DefaultPoolIdleTimeout      = 4 * time.Second
	maxPoolIdlePerServer        = 1 << 16
	// DefaultPoolReceiveBuffer: a LAN's bandwidth-delay product many times
	// over (50 Gbit/s at 80 µs), and within the window a Linux client
	// reaches after its first megabyte. It was 256 KiB until 2026-11-27:
	// then a 256 KiB body needed two of the window the server may fill.
	// Measured on the bench's lab with an nginx origin (wrk -t2 -c16,
	// engine auto, 256 KiB against 512 KiB): under cubic a 256 KiB body's
	// p99 went from 3.2-3.9 ms to 1.9-2.2 ms at the same rate (HAProxy's
	// was 2.4), 8 MiB bodies (ip) kept their rate at 15% more CPU; under
	// bbr nothing changed below 8 MiB, where ip costs 20% more CPU at the
	// same rate. ip refused a splice for the window (window_refused) 21
	// times in 740 8 MiB bodies, against 13.
	DefaultPoolReceiveBuffer Size = 512 << 10
	minPoolReceiveBuffer     Size = 4 << 10
	maxPoolReceiveBuffer     Size = 64 << 20
)

// WithDefaults returns u (which may be nil: no upstream_pool section) with
// every key left out set to its default.
func (u *UpstreamPool) WithDefaults() UpstreamPool {
	var out UpstreamPool
	if u != nil {
		out = *u
	}
	if out.MaxIdlePerServer == nil {
		n := DefaultPoolMaxIdlePerServer
		out.MaxIdlePerServer = &n
	}
	if out.IdleTimeout == 0 {
		out.IdleTimeout = Duration(DefaultPoolIdleTimeout)
	}
	return out
}

// Balances are the values of a pool's balance key.
var Balances = []string{"round_robin", "least_conn", "consistent_hash"}

func (v *validator) http(p string, l *Listener) {
	v.httpSection(p+".http", l.HTTP)
	if l.Proxy != "http-reverse" {
		return // kindSections reported routes and pools a kind does not read
	}
	if len(l.Pools) == 0 {
		v.errorf(p+".pools", "proxy http-reverse needs at least one pool")
	}
	if len(l.Routes) == 0 {
		v.errorf(p+".routes", "proxy http-reverse needs at least one route")
	}
	pools := v.pools(p, l.Pools, true)
	for i, r := range l.Routes {
		v.route(p+".routes["+itoa(i)+"]", r, pools)
	}
	v.upstreamPool(p+".upstream_pool", l)
	v.tls(p+".tls", l.TLS)
}

// pools checks a listener's pools and returns their names. needPath:
// their health checks must GET a path (http-reverse), else a connect
// may do (tcp).
func (v *validator) pools(p string, list []Pool, needPath bool) map[string]bool {
	pools := map[string]bool{}
	for i, pl := range list {
		pp := p + ".pools[" + itoa(i) + "]"
		if pl.Name == "" {
			v.errorf(pp+".name", "a pool needs a name")
		} else if pools[pl.Name] {
			v.errorf(pp+".name", "duplicate pool name %q", pl.Name)
		}
		pools[pl.Name] = true
		if pl.Balance != "" {
			v.oneOf(pp+".balance", pl.Balance, Balances)
		}
		v.hashOn(pp+".hash_on", pl)
		if len(pl.Servers) == 0 {
			v.errorf(pp+".servers", "a pool needs at least one server host:port")
		}
		v.poolServers(pp+".servers", pl.Servers)
		v.healthCheck(pp+".health_check", pl.HealthCheck, needPath)
		v.failKeys(pp, pl.MaxFails, pl.FailTimeout)
		v.queue(pp, pl.QueueTimeout, pl.MaxQueue, pl.Servers)
		v.resolver(pp+".resolver", pl.Resolver, pl.Servers)
		if pl.TLS != nil && !needPath {
			// needPath marks http-reverse's pools; a tcp listener's
			// pools take TLS through as it comes, never speak it.
			v.errorf(pp+".tls", "TLS to a pool's servers is http-reverse's: a tcp listener passes TLS through")
		} else {
			v.upstreamTLS(pp+".tls", pl.TLS)
		}
	}
	return pools
}

// upstreamPool checks the upstream_pool section. A PROXY protocol header
// names one client connection, so its upstream connections are never
// shared: a pool section there would be ignored, and is refused.
func (v *validator) upstreamPool(p string, l *Listener) {
	u := l.UpstreamPool
	if u == nil {
		return
	}
	if l.ProxyProtocol != "" {
		v.errorf(p, "not used with proxy_protocol: each upstream connection's header names its own client, so connections are never shared")
	}
	if n := u.MaxIdlePerServer; n != nil && (*n < 0 || *n > maxPoolIdlePerServer) {
		v.errorf(p+".max_idle_per_server", "expected 0 (no pool) to %d, got %d", maxPoolIdlePerServer, *n)
	}
	v.positiveOrLeftOut(p+".idle_timeout", int64(u.IdleTimeout), u.IdleTimeout.String(), DefaultPoolIdleTimeout)
	if b := u.ReceiveBuffer; b != nil && *b != 0 && (*b < minPoolReceiveBuffer || *b > maxPoolReceiveBuffer) {
		v.errorf(p+".receive_buffer", "expected 0 (the kernel's autotuning) or %s to %s, got %d bytes", minPoolReceiveBuffer, maxPoolReceiveBuffer, int64(*b))
	}
}

func (v *validator) httpSection(p string, h *HTTP) {
	if h == nil {
		return
	}
	for i, port := range h.ConnectPorts {
		if port < 1 || port > 65535 {
			v.errorf(p+".connect_ports["+itoa(i)+"]", "port %d: expected a number from 1 to 65535", port)
		}
	}
	for _, t := range []struct {
		key      string
		d        Duration
		fallback time.Duration
	}{
		{"header_timeout", h.HeaderTimeout, DefaultHTTPHeaderTimeout},
		{"request_timeout", h.RequestTimeout, DefaultHTTPRequestTimeout},
		{"body_timeout", h.BodyTimeout, DefaultHTTPBodyTimeout},
		{"response_timeout", h.ResponseTimeout, DefaultHTTPResponseTimeout},
		{"keepalive_timeout", h.KeepaliveTimeout, DefaultHTTPKeepaliveTimeout},
	} {
		v.positiveOrLeftOut(p+"."+t.key, int64(t.d), t.d.String(), t.fallback)
	}
	for i, c := range h.TrustedProxies {
		if _, err := acl.ParsePrefixes([]string{c}); err != nil {
			v.errorf(p+".trusted_proxies["+itoa(i)+"]", "%v", err)
		}
	}
	v.positiveOrLeftOut(p+".max_header_bytes", int64(h.MaxHeaderBytes), itoa(int(h.MaxHeaderBytes)), Size(DefaultHTTPMaxHeaderBytes))
	v.positiveOrLeftOut(p+".body_min_rate", int64(h.BodyMinRate), itoa(int(h.BodyMinRate)), Size(DefaultHTTPBodyMinRate))
	if h.BodyMinRate > maxBodyMinRate {
		v.errorf(p+".body_min_rate", "expected at most %s (bytes per second), got %d", maxBodyMinRate, int64(h.BodyMinRate))
	}
	v.positiveOrLeftOut(p+".max_headers", int64(h.MaxHeaders), itoa(h.MaxHeaders), DefaultHTTPMaxHeaders)
}

func (v *validator) route(p string, r Route, pools map[string]bool) {
	if !pools[r.Pool] {
		v.errorf(p+".pool", "unknown pool %q", r.Pool)
	}
	rules := 0
	for _, rule := range []struct{ key, val string }{{"path", r.Path}, {"path_prefix", r.PathPrefix}, {"path_suffix", r.PathSuffix}} {
		if rule.val == "" {
			continue
		}
		rules++
		if rule.key != "path_suffix" && !strings.HasPrefix(rule.val, "/") {
			v.errorf(p+"."+rule.key, "%q must start with /", rule.val)
		}
	}
	if rules > 1 {
		v.errorf(p, "a route takes at most one of path, path_prefix and path_suffix")
	}
}

// hashOn checks a pool's hash_on: one of client_ip, uri, header:NAME
// (a valid field name), and only under consistent_hash.
func (v *validator) hashOn(p string, pl Pool) {
	name, isHeader := strings.CutPrefix(pl.HashOn, "header:")
	switch {
	case pl.HashOn == "":
		return
	case pl.Balance != "consistent_hash":
		v.errorf(p, "hash_on is for balance consistent_hash (this pool balances %s)", cmp.Or(pl.Balance, "round_robin"))
	case isHeader && !httpguts.ValidHeaderFieldName(name):
		v.errorf(p, "%q is not a header field name", name)
	case !isHeader && pl.HashOn != "client_ip" && pl.HashOn != "uri":
		v.errorf(p, "unknown value %q (allowed: client_ip, uri, header:NAME)", pl.HashOn)
	}
}

// poolServers checks each server's address and weight, and that some
// server may be used (a pool's, or a listener's upstream list).
func (v *validator) poolServers(p string, servers []PoolServer) {
	total := 0
	for j, s := range servers {
		sp := p + "[" + itoa(j) + "]"
		v.serverAddress(sp, s)
		if s.MaxConns < 0 || s.MaxConns > maxMaxConns {
			v.errorf(sp+".max_conns", "expected 0 (no bound) to %d, got %d", maxMaxConns, s.MaxConns)
		}
		if s.Weight < 0 || s.Weight > MaxWeight {
			v.errorf(sp+".weight", "expected 0 (the server takes nothing) to %d, got %d", MaxWeight, s.Weight)
		} else {
			total += s.Weight
		}
	}
	if len(servers) > 0 && total == 0 {
		v.errorf(p, "every server has weight 0: none would ever be used")
	}
	if len(servers) > 0 && !slices.ContainsFunc(servers, func(s PoolServer) bool { return !s.Backup }) {
		v.errorf(p, "every server is a backup: a backup stands in for the others, so at least one must not be")
	}
}

// healthCheck checks a health_check section; a pool's needs a path, a
// listener's may leave it out (a connect check).
func (v *validator) healthCheck(p string, hc *HealthCheck, needPath bool) {
	if hc == nil {
		return
	}
	if (needPath || hc.Path != "") && !strings.HasPrefix(hc.Path, "/") {
		v.errorf(p+".path", "a health check needs a path starting with /")
	}
	switch {
	case hc.Host != "" && hc.Path == "":
		v.errorf(p+".host", "host is the Host field of a GET check: give a path too")
	case strings.ContainsFunc(hc.Host, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		v.errorf(p+".host", "%q is no host: spaces and control characters are not allowed", hc.Host)
	}
	if hc.Interval <= 0 {
		v.errorf(p+".interval", "must be more than 0")
	}
	if hc.Timeout <= 0 {
		v.errorf(p+".timeout", "must be more than 0")
	} else if hc.Interval > 0 && hc.Timeout > hc.Interval {
		v.errorf(p+".timeout", "must not be longer than interval (%s)", hc.Interval)
	}
	for _, t := range []struct {
		key string
		n   int
	}{{"fall", hc.Fall}, {"rise", hc.Rise}} {
		v.positiveOrLeftOut(p+"."+t.key, int64(t.n), itoa(t.n), 1)
		if t.n > maxThreshold {
			v.errorf(p+"."+t.key, "expected 1 to %d checks in a row, got %d", maxThreshold, t.n)
		}
	}
}

// UpstreamList is the listener's upstream list (tcp, filter) as a pool
// named "upstream": its servers, balance, health check, failure keys and
// queue.
func (l *Listener) UpstreamList() Pool {
	return Pool{Name: "upstream", Balance: l.Balance, Servers: l.Upstream, HealthCheck: l.HealthCheck,
		MaxFails: l.MaxFails, FailTimeout: l.FailTimeout, QueueTimeout: l.QueueTimeout, MaxQueue: l.MaxQueue,
		Resolver: l.Resolver}
}

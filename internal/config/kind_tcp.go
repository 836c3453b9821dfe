// A tcp listener's routing by the TLS ClientHello: tls_routes to pools by server name and ALPN, default_pool, request_timeout.

package config

import (
	"strings"
	"time"
)

// TLSRoute sends a tcp listener's TLS connections whose ClientHello
// matches to a pool, without terminating TLS. ServerName is a host name
// the hello's SNI must equal (case aside), or "*.suffix", which takes
// any name ending in .suffix (a.suffix, b.a.suffix; not suffix itself,
// as nginx's server_name); ALPN is a protocol the hello must offer
// (h2, http/1.1). A route needs one of them; given both, both must
// match. Routes are tried in order, the first that matches wins.
type TLSRoute struct {
	ServerName string `yaml:"server_name,omitempty"`
	ALPN       string `yaml:"alpn,omitempty"`
	Pool       string `yaml:"pool"`
}

// DefaultRequestTimeout is the default of a tcp listener's
// request_timeout: as long as the HTTP kinds wait for a request head.
const DefaultRequestTimeout = DefaultHTTPRequestTimeout

// maxALPN is the longest ALPN protocol name (a 1-byte length, RFC 7301).
const maxALPN = 255

// RoutesByHello reports whether a tcp listener routes by the TLS
// ClientHello: it has tls_routes or a default_pool.
func (l *Listener) RoutesByHello() bool { return len(l.TLSRoutes) > 0 || l.DefaultPool != "" }

// HelloTimeout is how long, from accept, a tcp listener that routes by
// the ClientHello waits for the whole hello: request_timeout, or its
// default.
func (l *Listener) HelloTimeout() time.Duration {
	if l.RequestTimeout == 0 {
		return DefaultRequestTimeout
	}
	return l.RequestTimeout.Std()
}

// tlsRouting checks the keys of routing by the ClientHello: only a tcp
// listener reads them, and one that does takes its servers from pools,
// each with its own balance, health check and failure keys.
func (v *validator) tlsRouting(p string, l *Listener) {
	if l.RequestTimeout != 0 && (l.Proxy != "tcp" || !l.RoutesByHello()) {
		hint := "the HTTP kinds' is http.request_timeout"
		if l.Proxy == "tcp" {
			hint = "a tcp listener waits for a TLS ClientHello only with tls_routes or default_pool"
		}
		v.errorf(p+".request_timeout", "request_timeout is not used by proxy %s here (%s)", l.Proxy, hint)
	}
	if l.Proxy != "tcp" {
		return // kindSections reported tls_routes, default_pool and pools
	}
	if !l.RoutesByHello() {
		if len(l.Pools) > 0 {
			v.errorf(p+".pools", "a tcp listener's pools are for tls_routes and default_pool, and it has neither (its servers are upstream)")
		}
		return
	}
	v.positiveOrLeftOut(p+".request_timeout", int64(l.RequestTimeout), l.RequestTimeout.String(), DefaultRequestTimeout)
	v.onPools(p, l)
	if len(l.Pools) == 0 {
		v.errorf(p+".pools", "tls_routes and default_pool send connections to pools: give at least one")
	}
	pools := v.pools(p, l.Pools, false)
	for i, pl := range l.Pools {
		if pl.HashOn != "" && pl.HashOn != "client_ip" {
			v.errorf(p+".pools["+itoa(i)+"].hash_on", "a tcp listener hashes the client's address (client_ip): %q is for http-reverse", pl.HashOn)
		}
	}
	for i, r := range l.TLSRoutes {
		v.tlsRoute(p+".tls_routes["+itoa(i)+"]", r, pools, l.Pools)
	}
	if l.DefaultPool != "" && !pools[l.DefaultPool] {
		v.errorf(p+".default_pool", "unknown pool %q%s", l.DefaultPool, poolHint(l.DefaultPool, l.Pools))
	}
}

// onPools refuses a tcp listener's upstream-list keys next to
// tls_routes: the servers and how they are picked are the pools' then.
func (v *validator) onPools(p string, l *Listener) {
	for _, k := range []struct {
		key string
		set bool
	}{
		{"upstream", len(l.Upstream) > 0}, {"balance", l.Balance != ""}, {"health_check", l.HealthCheck != nil},
		{"max_fails", l.MaxFails != nil}, {"fail_timeout", l.FailTimeout != 0},
		{"queue_timeout", l.QueueTimeout != 0}, {"max_queue", l.MaxQueue != 0},
	} {
		if k.set {
			v.errorf(p+"."+k.key, "a listener with tls_routes or default_pool sends connections to its pools: set %s on each pool", k.key)
		}
	}
}

// tlsRoute checks one route: a known pool, and a server name or an ALPN
// protocol to match.
func (v *validator) tlsRoute(p string, r TLSRoute, pools map[string]bool, list []Pool) {
	if !pools[r.Pool] {
		v.errorf(p+".pool", "unknown pool %q%s", r.Pool, poolHint(r.Pool, list))
	}
	if r.ServerName == "" && r.ALPN == "" {
		v.errorf(p, "a route needs server_name or alpn (or both); default_pool takes the connections no route takes")
	}
	if r.ServerName != "" {
		v.serverName(p+".server_name", r.ServerName)
	}
	if n := len(r.ALPN); n > maxALPN {
		v.errorf(p+".alpn", "an ALPN protocol name is at most %d bytes, got %d", maxALPN, n)
	}
}

// serverName checks a route's server_name: a host name, or *.suffix.
func (v *validator) serverName(p, name string) {
	host, wild := strings.CutPrefix(name, "*.")
	switch {
	case name == "*":
		v.errorf(p, "%q would match every name: use default_pool", name)
	case strings.HasSuffix(name, "."):
		v.errorf(p, "%q ends in a dot, which no client sends in SNI: leave it out", name)
	case strings.Contains(host, "*"):
		v.errorf(p, "%q: a wildcard is allowed only as the first label, *.suffix", name)
	case looksNumeric(host) && !wild:
		v.errorf(p, "%q is an IP address, which no client sends in SNI (RFC 6066): route it with default_pool", name)
	case !isHostname(host):
		v.errorf(p, "%q is not a host name (letters, digits, '-' and '_' in dot-separated labels) or *.suffix", name)
	}
}

// poolHint names the pool that name likely misspells, or lists them.
func poolHint(name string, pools []Pool) string {
	names := make([]string, len(pools))
	for i, pl := range pools {
		names[i] = pl.Name
	}
	if hint := suggest(name, names); strings.Contains(hint, "did you mean") {
		return hint
	}
	return " (pools: " + strings.Join(names, ", ") + ")"
}

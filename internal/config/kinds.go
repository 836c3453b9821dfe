// Proxy-specific configuration sections: which kind reads which section, and the checks common to all of them.

package config

import (
	"strconv"

	"github.com/splicer/splicer/internal/acl"
)

// ProxyProtocols are the values of a listener's proxy_protocol key.
var ProxyProtocols = []string{"", "v1", "v2"}

// kindSections maps each proxy-specific section to the kinds that read it.
var kindSections = map[string][]string{
	"socks5": {"socks5"},
	"http":   {"http-forward", "http-reverse", "filter"},
	"filter": {"filter"},
	"routes": {"http-reverse"},
	"pools":  {"http-reverse", "tcp"},
	// Routing by the TLS ClientHello (kind_tcp.go).
	"tls_routes":   {"tcp"},
	"default_pool": {"tcp"},
	// Shared upstream connections: http-reverse's per-server pools.
	"upstream_pool": {"http-reverse"},
	// TLS termination: http-reverse only.
	"tls": {"http-reverse"},
	// Only these kinds let the client name the destination.
	"destinations": {"http-forward", "socks5"},
}

// builtinKeys maps keys of the listener itself to the built-in kinds that
// honour them: a key a kind would accept and ignore is refused instead.
// (Kinds registered by others decide for themselves.)
var builtinKeys = map[string][]string{
	"splice_after":   {"tcp"},
	"upstream":       {"tcp", "filter"},
	"balance":        {"tcp", "filter"},
	"max_fails":      {"tcp", "filter"},
	"fail_timeout":   {"tcp", "filter"},
	"queue_timeout":  {"tcp", "filter"},
	"max_queue":      {"tcp", "filter"},
	"health_check":   {"tcp", "filter"},
	"resolver":       {"tcp", "filter"},
	"proxy_protocol": {"tcp", "socks5", "filter", "http-forward", "http-reverse"},
}

// builtinKinds are the kinds builtinKeys speaks for.
var builtinKinds = []string{"tcp", "socks5", "filter", "http-forward", "http-reverse"}

// kindSections reports sections that the listener's kind does not read
// (almost surely a mistake), then checks the kind's own sections.
func (v *validator) kindSections(p string, l *Listener) {
	present := map[string]bool{
		"socks5": l.SOCKS5 != nil, "http": l.HTTP != nil, "filter": l.Filter != nil,
		"routes": len(l.Routes) > 0, "pools": len(l.Pools) > 0,
		"destinations": l.Destinations != nil, "upstream_pool": l.UpstreamPool != nil,
		"tls_routes": len(l.TLSRoutes) > 0, "default_pool": l.DefaultPool != "",
		"tls": l.TLS != nil,
	}
	for section, kinds := range kindSections {
		if present[section] && !contains(kinds, l.Proxy) {
			v.errorf(p+"."+section, "section %s is not used by proxy %s (it is for: %v)", section, l.Proxy, kinds)
		}
	}
	if contains(builtinKinds, l.Proxy) {
		set := map[string]bool{
			"splice_after": l.SpliceAfter != 0, "upstream": len(l.Upstream) > 0 && l.Proxy != "socks5",
			"proxy_protocol": l.ProxyProtocol != "",
			"max_fails":      l.MaxFails != nil, "fail_timeout": l.FailTimeout != 0, "queue_timeout": l.QueueTimeout != 0,
			"max_queue":    l.MaxQueue != 0,
			"health_check": l.HealthCheck != nil, "balance": l.Balance != "", "resolver": l.Resolver != nil,
		}
		for key, kinds := range builtinKeys {
			if set[key] && !contains(kinds, l.Proxy) {
				v.errorf(p+"."+key, "%s is not used by proxy %s (it is for: %v)", key, l.Proxy, kinds)
			}
		}
	}
	v.accessRules(p, l)
	v.tlsRouting(p, l)
	switch l.Proxy {
	case "socks5":
		v.socks5(p, l)
	case "http-forward", "http-reverse":
		v.http(p, l)
	case "filter":
		v.filter(p, l)
	}
}

// accessRules checks the client and destination rules parse.
func (v *validator) accessRules(p string, l *Listener) {
	for key, list := range map[string][]string{"allow_clients": l.AllowClients, "deny_clients": l.DenyClients} {
		for i, s := range list {
			if _, err := acl.ParsePrefixes([]string{s}); err != nil {
				v.errorf(p+"."+key+"["+itoa(i)+"]", "%v", err)
			}
		}
	}
	v.acceptProxyProtocol(p, l)
	if l.MaxConnectionsPerClient < 0 {
		v.errorf(p+".max_connections_per_client", "must not be negative, got %d", l.MaxConnectionsPerClient)
	}
	if l.Destinations == nil {
		return
	}
	for key, list := range map[string][]string{"allow": l.Destinations.Allow, "deny": l.Destinations.Deny} {
		for i, s := range list {
			if _, err := acl.ParseRule(s); err != nil {
				v.errorf(p+".destinations."+key+"["+itoa(i)+"]", "%v", err)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func itoa(i int) string { return strconv.Itoa(i) }

// acceptProxyProtocol checks that a listener accepting the PROXY protocol
// names whom it trusts to send it, and that the names parse.
func (v *validator) acceptProxyProtocol(p string, l *Listener) {
	switch {
	case l.AcceptProxyProtocol && len(l.ProxyProtocolFrom) == 0:
		v.errorf(p+".proxy_protocol_from", "accept_proxy_protocol needs the CIDRs of the balancers that send the header")
	case !l.AcceptProxyProtocol && len(l.ProxyProtocolFrom) > 0:
		v.errorf(p+".proxy_protocol_from", "used only with accept_proxy_protocol: true")
	}
	for i, s := range l.ProxyProtocolFrom {
		if _, err := acl.ParsePrefixes([]string{s}); err != nil {
			v.errorf(p+".proxy_protocol_from["+itoa(i)+"]", "%v", err)
		}
	}
}

// Tests of a tcp listener's routing by the TLS ClientHello: what parses, and each mistake on its line.

package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTLSRoutesParse(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: sni",
		"    listen: ':8443'",
		"    tls_routes:",
		"      - {server_name: a.test, pool: a}",
		"      - {server_name: '*.b.test', alpn: h2, pool: b}",
		"      - {alpn: acme-tls/1, pool: a}",
		"    default_pool: a",
		"    pools:",
		"      - {name: a, servers: ['10.0.0.1:443'], health_check: {interval: 1s, timeout: 1s}}",
		"      - {name: b, balance: consistent_hash, hash_on: client_ip, servers: ['10.0.0.2:443', {address: '10.0.0.3:443', max_conns: 10}], queue_timeout: 1s}",
		"  - {name: slow, listen: ':8444', default_pool: p, request_timeout: 3s, pools: [{name: p, servers: ['h:1']}]}",
	))
	l := cfg.Listeners[0]
	want := []TLSRoute{{"a.test", "", "a"}, {"*.b.test", "h2", "b"}, {"", "acme-tls/1", "a"}}
	if !slices.Equal(l.TLSRoutes, want) || l.DefaultPool != "a" || len(l.Pools) != 2 || !l.RoutesByHello() {
		t.Errorf("parsed %+v, want routes %+v and default a", l, want)
	}
	if got := l.HelloTimeout(); got != 10*time.Second {
		t.Errorf("default request_timeout %v, want 10s", got)
	}
	if got := cfg.Listeners[1].HelloTimeout(); got != 3*time.Second || !cfg.Listeners[1].RoutesByHello() {
		t.Errorf("request_timeout %v, want 3s", got)
	}
}

func TestTLSRoutesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []wantErr
	}{
		{"routes without pools", lines(
			"listeners:",
			"  - {name: a, listen: ':1', tls_routes: [{server_name: a.test, pool: a}]}",
		), []wantErr{{2, "listeners[0].pools", "give at least one"}, {2, "listeners[0].tls_routes[0].pool", `unknown pool "a"`}}},
		{"misspelt pool", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    pools: [{name: alpha, servers: ['h:1']}, {name: beta, servers: ['h:2']}]",
			"    tls_routes: [{server_name: a.test, pool: aplha}]",
			"    default_pool: gamma",
		), []wantErr{
			{5, "listeners[0].tls_routes[0].pool", `unknown pool "aplha" (did you mean "alpha"?)`},
			{6, "listeners[0].default_pool", `unknown pool "gamma" (pools: alpha, beta)`},
		}},
		{"misspelt key", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    tls_routes: [{servername: a.test, pool: p}]",
		), []wantErr{{5, "listeners[0].tls_routes[0]", "needs server_name or alpn"}, {5, "listeners[0].tls_routes[0].servername", `did you mean "server_name"`}}},
		{"bad server names", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    tls_routes:",
			"      - {server_name: '*', pool: p}",
			"      - {server_name: a.test., pool: p}",
			"      - {server_name: 'a.*.test', pool: p}",
			"      - {server_name: 10.0.0.1, pool: p}",
			"      - {server_name: 'a test', pool: p}",
			"      - {pool: p}",
		), []wantErr{
			{6, "listeners[0].tls_routes[0].server_name", "use default_pool"},
			{7, "listeners[0].tls_routes[1].server_name", "ends in a dot"},
			{8, "listeners[0].tls_routes[2].server_name", "only as the first label"},
			{9, "listeners[0].tls_routes[3].server_name", "is an IP address"},
			{10, "listeners[0].tls_routes[4].server_name", "is not a host name"},
			{11, "listeners[0].tls_routes[5]", "needs server_name or alpn"},
		}},
		{"upstream-list keys beside pools", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: ['h:1']",
			"    balance: least_conn",
			"    health_check: {interval: 1s, timeout: 1s}",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    default_pool: p",
		), []wantErr{
			{4, "listeners[0].upstream", "set upstream on each pool"},
			{5, "listeners[0].balance", "set balance on each pool"},
			{6, "listeners[0].health_check", "set health_check on each pool"},
		}},
		{"pools without routes", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:1'], pools: [{name: p, servers: ['h:1']}]}",
		), []wantErr{{2, "listeners[0].pools", "for tls_routes and default_pool"}}},
		{"request_timeout without routes", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:1'], request_timeout: 5s}",
			"  - {name: b, listen: ':2', proxy: http-forward, request_timeout: 5s}",
		), []wantErr{
			{2, "listeners[0].request_timeout", "only with tls_routes or default_pool"},
			{3, "listeners[1].request_timeout", "http.request_timeout"},
		}},
		{"request_timeout 0 and a hash of the URI", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    request_timeout: 0s",
			"    pools: [{name: p, balance: consistent_hash, hash_on: uri, servers: ['h:1']}]",
			"    default_pool: p",
		), []wantErr{
			{4, "listeners[0].request_timeout", "leave the key out for its default (10s)"},
			{5, "listeners[0].pools[0].hash_on", `"uri" is for http-reverse`},
		}},
		{"routes on another kind", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-forward, tls_routes: [{server_name: a.test, pool: p}], default_pool: p}",
		), []wantErr{
			{2, "listeners[0].tls_routes", "not used by proxy http-forward"},
			{2, "listeners[0].default_pool", "not used by proxy http-forward"},
		}},
		{"alpn too long", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    tls_routes: [{alpn: '"+strings.Repeat("x", 256)+"', pool: p}]",
		), []wantErr{{5, "listeners[0].tls_routes[0].alpn", "at most 255 bytes, got 256"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, tc.data), tc.want)
		})
	}
}

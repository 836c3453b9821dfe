// Tests of the http section, routes and pools: defaults, and each mistake reported on its line.

package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHTTPDefaults(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', proxy: http-forward}",
		"  - {name: b, listen: ':2', proxy: http-forward, http: {cache_bytes: 0, connect_ports: [443, 8443], header_timeout: 2s, body_timeout: 5s, response_timeout: 7s, keepalive_timeout: 9s}}",
	))
	a := cfg.Listeners[0].HTTP.WithDefaults()
	if !slices.Equal(a.ConnectPorts, []int{443}) || a.HeaderTimeout.Std() != 10*time.Second || a.BodyTimeout.Std() != time.Minute || a.ResponseTimeout.Std() != time.Minute || a.KeepaliveTimeout.Std() != 75*time.Second ||
		a.MaxHeaderBytes != 32<<10 || a.MaxHeaders != 100 || *a.CacheBytes != 64<<20 {
		t.Errorf("defaults without an http section = %+v (cache %d)", a, *a.CacheBytes)
	}
	b := cfg.Listeners[1].HTTP.WithDefaults()
	if !slices.Equal(b.ConnectPorts, []int{443, 8443}) || b.HeaderTimeout.Std() != 2*time.Second || b.BodyTimeout.Std() != 5*time.Second || b.ResponseTimeout.Std() != 7*time.Second || b.KeepaliveTimeout.Std() != 9*time.Second || *b.CacheBytes != 0 {
		t.Errorf("explicit values = %+v (cache %d), want ports [443 8443], 2s, 5s, 7s, 9s and the cache off", b, *b.CacheBytes)
	}
}

// reverseLines is a configuration of one http-reverse listener "a" on
// ':1' with the listener keys more (indented four spaces): the lines
// keep their numbers, which the errors name.
func reverseLines(more ...string) []byte {
	return lines(append([]string{"listeners:", "  - name: a", "    listen: ':1'", "    proxy: http-reverse"}, more...)...)
}

func TestHTTPReverseParses(t *testing.T) {
	cfg := mustParse(t, reverseLines(
		"    routes:",
		"      - {host: example.com, path_prefix: /api/, pool: api}",
		"      - {path_suffix: .png, pool: static}",
		"      - {pool: static}",
		"    pools:",
		"      - {name: api, balance: least_conn, servers: ['10.0.0.1:80', '10.0.0.2:80'],",
		"         health_check: {path: /health, interval: 1s, timeout: 500ms}}",
		"      - {name: static, balance: consistent_hash, servers: ['10.0.0.3:80']}",
	))
	l := cfg.Listeners[0]
	if len(l.Routes) != 3 || l.Routes[0].PathPrefix != "/api/" || l.Pools[0].HealthCheck.Timeout.Std() != 500*time.Millisecond {
		t.Errorf("parsed %+v", l)
	}
}

func TestPoolServersTakeAnAddressOrAWeight(t *testing.T) {
	cfg := mustParse(t, reverseLines(
		"    routes: [{pool: p}]",
		"    pools:",
		"      - name: p",
		"        servers:",
		"          - 10.0.0.1:80",
		"          - {address: '10.0.0.2:80', weight: 3}",
		"          - {address: '10.0.0.3:80', weight: 0}",
		"          - {address: '10.0.0.4:80'}",
		"          - {address: '10.0.0.5:80', backup: true, max_conns: 100}",
	))
	want := []PoolServer{{Address: "10.0.0.1:80", Weight: 1}, {Address: "10.0.0.2:80", Weight: 3}, {Address: "10.0.0.3:80"},
		{Address: "10.0.0.4:80", Weight: 1}, {Address: "10.0.0.5:80", Weight: 1, Backup: true, MaxConns: 100}}
	if got := cfg.Listeners[0].Pools[0].Servers; !slices.Equal(got, want) {
		t.Errorf("servers %+v, want %+v", got, want)
	}
}

// upstreamPools parses three http-reverse listeners: the first without
// an upstream_pool, the others with the given ones (flow maps).
func upstreamPools(tb testing.TB, b, c string) []Listener {
	tb.Helper()
	rev := "proxy: http-reverse, pools: [{name: p, servers: ['h:1']}], routes: [{pool: p}]"
	return mustParse(tb, lines(
		"listeners:",
		"  - {name: a, listen: ':1', "+rev+"}",
		"  - {name: b, listen: ':2', "+rev+", upstream_pool: "+b+"}",
		"  - {name: c, listen: ':3', "+rev+", upstream_pool: "+c+"}",
	)).Listeners
}

func TestUpstreamPoolDefaults(t *testing.T) {
	ls := upstreamPools(t, "{max_idle_per_server: 0}", "{max_idle_per_server: 8, idle_timeout: 30s}")
	for i, want := range []struct {
		max  int
		idle time.Duration
	}{{64, 4 * time.Second}, {0, 4 * time.Second}, {8, 30 * time.Second}} {
		got := ls[i].UpstreamPool.WithDefaults()
		if *got.MaxIdlePerServer != want.max || got.IdleTimeout.Std() != want.idle {
			t.Errorf("listener %d: max_idle_per_server %d, idle_timeout %s; want %d, %s",
				i, *got.MaxIdlePerServer, got.IdleTimeout, want.max, want.idle)
		}
	}
}

func TestUpstreamPoolReceiveBuffer(t *testing.T) {
	ls := upstreamPools(t, "{receive_buffer: 0}", "{receive_buffer: 1MiB}")
	if b := ls[0].UpstreamPool.WithDefaults().ReceiveBuffer; b != nil {
		t.Errorf("left out: %d, want unset (the forwarder picks by engine)", *b)
	}
	for i, want := range map[int]Size{1: 0, 2: 1 << 20} {
		if b := ls[i].UpstreamPool.WithDefaults().ReceiveBuffer; b == nil || *b != want {
			t.Errorf("listener %d: receive_buffer %v, want %d", i, b, want)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []wantErr
	}{
		{"reverse without pools and routes", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-reverse}",
		), []wantErr{{2, "listeners[0].pools", "at least one pool"}, {2, "listeners[0].routes", "at least one route"}}},
		{"route to an unknown pool", reverseLines(
			"    pools: [{name: p, servers: ['h:1']}]",
			"    routes: [{pool: q}]",
		), []wantErr{{6, "listeners[0].routes[0].pool", `unknown pool "q"`}}},
		{"two path rules", reverseLines(
			"    pools: [{name: p, servers: ['h:1']}]",
			"    routes:",
			"      - {path: /a, path_prefix: /b, pool: p}",
		), []wantErr{{7, "listeners[0].routes[0]", "at most one of path, path_prefix and path_suffix"}}},
		{"path without slash", reverseLines(
			"    pools: [{name: p, servers: ['h:1']}]",
			"    routes:",
			"      - {path_prefix: api, pool: p}",
		), []wantErr{{7, "listeners[0].routes[0].path_prefix", "must start with /"}}},
		{"bad server weights", reverseLines(
			"    routes: [{pool: p}, {path: /q, pool: q}]",
			"    pools:",
			"      - {name: p, servers: [{address: 'h:1', weight: 300}, {address: 'h:2', wieght: 2}, {weight: 2}]}",
			"      - {name: q, servers: [{address: 'h:1', weight: 0}]}",
		), []wantErr{
			{7, "listeners[0].pools[0].servers[0].weight", "expected 0 (the server takes nothing) to 256, got 300"},
			{7, "listeners[0].pools[0].servers[1].wieght", `unknown key "wieght" (did you mean "weight"?)`},
			{7, "listeners[0].pools[0].servers[2]", "missing"},
			{8, "listeners[0].pools[1].servers", "every server has weight 0"},
		}},
		{"bad hash_on", reverseLines(
			"    routes: [{pool: p}, {path: /q, pool: q}, {path: /r, pool: r}]",
			"    pools:",
			"      - {name: p, hash_on: uri, servers: ['h:1']}",
			"      - {name: q, balance: consistent_hash, hash_on: cookie, servers: ['h:1']}",
			"      - {name: r, balance: consistent_hash, hash_on: 'header:X User', servers: ['h:1']}",
		), []wantErr{
			{7, "listeners[0].pools[0].hash_on", "hash_on is for balance consistent_hash (this pool balances round_robin)"},
			{8, "listeners[0].pools[1].hash_on", `unknown value "cookie" (allowed: client_ip, uri, header:NAME)`},
			{9, "listeners[0].pools[2].hash_on", `"X User" is not a header field name`},
		}},
		{"unknown balance and duplicate pool", reverseLines(
			"    routes: [{pool: p}]",
			"    pools:",
			"      - {name: p, balance: random, servers: ['h:1']}",
			"      - {name: p, servers: ['h:2']}",
		), []wantErr{{7, "listeners[0].pools[0].balance", `unknown value "random"`}, {8, "listeners[0].pools[1].name", `duplicate pool name "p"`}}},
		{"bad health check", reverseLines(
			"    routes: [{pool: p}]",
			"    pools:",
			"      - name: p",
			"        servers: ['h:1']",
			"        health_check: {path: health, interval: 1s, timeout: 2s}",
		), []wantErr{{9, "listeners[0].pools[0].health_check.path", "starting with /"}, {9, "listeners[0].pools[0].health_check.timeout", "not be longer than interval"}}},
		{"bad connect port and negative cache", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    proxy: http-forward",
			"    http:",
			"      connect_ports: [443, 70000]",
			"      cache_bytes: -1",
		), []wantErr{{6, "listeners[0].http.connect_ports[1]", "from 1 to 65535"}, {7, "listeners[0].http.cache_bytes", `invalid size "-1"`}}},
		{"bad upstream pool", reverseLines(
			"    routes: [{pool: p}]",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    upstream_pool:",
			"      max_idle_per_server: -1",
			"      idle_timeout: -1s",
			"      receive_buffer: 1KiB",
		), []wantErr{{8, "listeners[0].upstream_pool.max_idle_per_server", "expected 0 (no pool) to 65536, got -1"},
			{9, "listeners[0].upstream_pool.idle_timeout", "must not be negative"},
			{10, "listeners[0].upstream_pool.receive_buffer", "expected 0 (the kernel's autotuning) or 4KiB to 64MiB, got 1024 bytes"}}},
		{"upstream pool with proxy protocol", reverseLines(
			"    proxy_protocol: v2",
			"    routes: [{pool: p}]",
			"    pools: [{name: p, servers: ['h:1']}]",
			"    upstream_pool: {max_idle_per_server: 4}",
		), []wantErr{{8, "listeners[0].upstream_pool", "not used with proxy_protocol"}}},
		{"upstream pool on http-forward", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    proxy: http-forward",
			"    upstream_pool: {idle_timeout: 1s}",
		), []wantErr{{5, "listeners[0].upstream_pool", "not used by proxy http-forward"}}},
		{"routes on http-forward", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    proxy: http-forward",
			"    routes: [{pool: p}]",
		), []wantErr{{5, "listeners[0].routes", "not used by proxy http-forward"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, parseErrors(t, tc.data), tc.want) })
	}
}

func TestHTTPExamplesParse(t *testing.T) {
	for _, tc := range []struct{ file, kind string }{{"http-forward.yaml", "http-forward"}, {"http-reverse.yaml", "http-reverse"}} {
		cfg, err := Load(examplePath(tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(cfg.Listeners) != 1 || cfg.Listeners[0].Proxy != tc.kind {
			t.Errorf("%s: listeners %+v, want one %s", tc.file, cfg.Listeners, tc.kind)
		}
	}
}

// TestBodyMinRate: http.body_min_rate defaults to 500 bytes per second,
// takes a size, and refuses 0 written out and a floor past 1 GiB/s.
func TestBodyMinRate(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', proxy: http-forward}",
		"  - {name: b, listen: ':2', proxy: http-forward, http: {body_min_rate: 4KiB}}",
	))
	if got := cfg.Listeners[0].HTTP.WithDefaults().BodyMinRate; got != 500 {
		t.Errorf("default body_min_rate %d, want 500", got)
	}
	if got := cfg.Listeners[1].HTTP.WithDefaults().BodyMinRate; got != 4<<10 {
		t.Errorf("body_min_rate: 4KiB gave %d", got)
	}
	errs := parseErrors(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', proxy: http-forward, http: {body_min_rate: 0}}",
		"  - {name: b, listen: ':2', proxy: http-forward, http: {body_min_rate: 2GiB}}",
	))
	want := []wantErr{
		{2, "listeners[0].http.body_min_rate", "leave the key out for its default (500)"},
		{3, "listeners[1].http.body_min_rate", "expected at most 1GiB"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if errs[i].Line != w.line || errs[i].Path != w.path || !strings.Contains(errs[i].Msg, w.msg) {
			t.Errorf("error %d = %v, want line %d, %s, %q", i, errs[i], w.line, w.path, w.msg)
		}
	}
}

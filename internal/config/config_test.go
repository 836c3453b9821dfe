// Tests for Parse and Load: defaults, round trips, and every kind of error with its line.

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// lines joins its arguments into a YAML file, so that a test case's line
// numbers are its argument positions.
func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

func mustParse(tb testing.TB, data []byte) *Config {
	tb.Helper()
	cfg, err := Parse("test.yaml", data)
	if err != nil {
		tb.Fatalf("Parse failed:\n%v\ninput:\n%s", err, data)
	}
	return cfg
}

// parseErrors parses data, which must be invalid, and returns its errors.
func parseErrors(tb testing.TB, data []byte) Errors {
	tb.Helper()
	cfg, err := Parse("test.yaml", data)
	if err == nil {
		tb.Fatalf("Parse succeeded, want errors; got %+v\ninput:\n%s", cfg, data)
	}
	if cfg != nil {
		tb.Errorf("Parse returned a Config along with errors")
	}
	var errs Errors
	if !errors.As(err, &errs) {
		tb.Fatalf("Parse error is %T, want Errors: %v", err, err)
	}
	return errs
}

func listenerWith(name, listen string, upstream ...string) Listener {
	l := DefaultListener()
	l.Name, l.Listen, l.Upstream = name, listen, Servers(upstream...)
	return l
}

func TestParseFillsDefaults(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: plug",
		"    listen: 10.99.1.1:7000",
		"    upstream: [10.99.2.2:5201]",
	))
	want := Default()
	l := listenerWith("plug", "10.99.1.1:7000", "10.99.2.2:5201")
	l.Line = 2
	want.Listeners = []Listener{l}
	want.Source, want.SourceName = cfg.Source, cfg.SourceName
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got  %+v\nwant %+v", *cfg, want)
	}
	// Spot-check the defaults the issue fixes, in units a user reads.
	if got := cfg.Listeners[0]; got.ConnectTimeout.Std() != 5*time.Second || got.IdleTimeout.Std() != time.Hour ||
		got.MaxConnections != 10000 || got.Engine != "auto" || got.Proxy != "tcp" || got.SpliceAfter != 0 {
		t.Errorf("listener defaults = %+v", got)
	}
	if cfg.Admin != "" || cfg.Log.Level != "info" || cfg.Log.Format != "text" || cfg.ShutdownTimeout.Std() != 30*time.Second {
		t.Errorf("top-level defaults = %+v", cfg)
	}
}

func TestParseExplicitValuesOverrideDefaults(t *testing.T) {
	cfg := mustParse(t, lines(
		"admin: '[::1]:9901'",
		"log: {level: debug, format: json}",
		"shutdown_timeout: 1m30s",
		"threads: 3",
		"engines:",
		"  copy: {buffer_size: 4096}",
		"  pipe: {pipe_size: 256KiB}",
		"  sockmap: {enabled: false}",
		"  ip: {enabled: false, time_wait: 0s, idle_timeout: 5m, max_pairs: 1024, pin_dir: /sys/fs/bpf/edge, local_ports: 30000-30999, min_body: 1MiB}",
		"listeners:",
		"  - name: a",
		"    listen: ':7000'",
		"    proxy: tcp",
		"    upstream: [10.0.0.1:80, 'backend.example:80', '[fd00::1]:80']",
		"    engine: pipe",
		"    connect_timeout: 250ms",
		"    idle_timeout: 0",    // 0 must stay 0 (never), not become the default
		"    max_connections: 0", // likewise: unlimited
		"    splice_after: 2s",
		"    tcp_keepalive: {idle: 1m, interval: 5s, count: 4}",
	))
	want := Config{
		Admin:           "[::1]:9901",
		Log:             Log{Level: "debug", Format: "json"},
		AccessLog:       AccessLog{Format: "text"},
		ShutdownTimeout: Duration(90 * time.Second),
		Threads:         3,
		Memory:          Memory{DetachedGCPercent: DefaultDetachedGCPercent, DetachedPairs: DefaultDetachedPairs},
		Engines: Engines{
			Copy:    CopyEngine{BufferSize: 4096},
			Pipe:    PipeEngine{PipeSize: 256 << 10},
			Sockmap: SockmapEngine{Enabled: false},
			IP:      IPEngine{Enabled: false, TimeWait: 0, IdleTimeout: Duration(5 * time.Minute), MaxPairs: 1024, PinDir: "/sys/fs/bpf/edge", LocalPorts: "30000-30999", MinBody: 1 << 20},
		},
		Listeners: []Listener{{
			Name: "a", Listen: ":7000", Proxy: "tcp",
			Upstream:       Servers("10.0.0.1:80", "backend.example:80", "[fd00::1]:80"),
			Engine:         "pipe",
			Promote:        DefaultPromote,
			ConnectTimeout: Duration(250 * time.Millisecond),
			IdleTimeout:    0,
			MaxConnections: 0,
			SpliceAfter:    Duration(2 * time.Second),
			TCPKeepalive:   TCPKeepalive{Idle: Duration(time.Minute), Interval: Duration(5 * time.Second), Count: 4},
			Line:           11,
		}},
	}
	want.Source, want.SourceName = cfg.Source, cfg.SourceName
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("got  %+v\nwant %+v", *cfg, want)
	}
}

func TestParseAcceptsYAMLConveniences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  []byte
		check func(*Config) bool
	}{
		{"JSON is YAML", []byte(`{"listeners": [{"name": "a", "listen": "127.0.0.1:1", "upstream": ["127.0.0.1:2"]}]}`),
			func(c *Config) bool { return c.Listeners[0].Name == "a" }},
		{"null value keeps the default", lines(
			"log:",
			"  level: ~",
			"listeners: [{name: a, listen: ':1', upstream: ['h:2']}]",
		), func(c *Config) bool { return c.Log.Level == "info" }},
		{"anchors and merge keys share listener settings", lines(
			"listeners:",
			"  - &base {name: a, listen: ':1', upstream: ['h:2'], engine: copy, max_connections: 7}",
			"  - <<: *base",
			"    name: b",
			"    listen: ':2'",
		), func(c *Config) bool {
			b := c.Listeners[1]
			return b.Name == "b" && b.Listen == ":2" && b.Engine == "copy" && b.MaxConnections == 7 && b.Line == 3
		}},
		{"port 0 listeners do not conflict", lines(
			"listeners:",
			"  - {name: a, listen: '127.0.0.1:0', upstream: ['h:2']}",
			"  - {name: b, listen: '127.0.0.1:0', upstream: ['h:2']}",
		), func(c *Config) bool { return len(c.Listeners) == 2 }},
		{"same port on different addresses", lines(
			"listeners:",
			"  - {name: a, listen: '127.0.0.1:80', upstream: ['h:2']}",
			"  - {name: b, listen: '127.0.0.2:80', upstream: ['h:2']}",
			"  - {name: c, listen: '[::1]:80', upstream: ['h:2']}",
		), func(c *Config) bool { return len(c.Listeners) == 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cfg := mustParse(t, tc.data); !tc.check(cfg) {
				t.Errorf("unexpected config %+v", cfg)
			}
		})
	}
}

func TestConfigRoundTripsThroughYAML(t *testing.T) {
	cfg, err := Load(filepath.Join("..", "..", "examples", "tcp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again := mustParse(t, out)
	for i := range again.Listeners {
		again.Listeners[i].Line = cfg.Listeners[i].Line // positions differ, values must not
	}
	again.Source, again.SourceName = cfg.Source, cfg.SourceName
	if !reflect.DeepEqual(cfg, again) {
		t.Errorf("after Marshal and Parse:\n got %+v\nwant %+v\nYAML:\n%s", again, cfg, out)
	}
}

// TestSourceLoadsAgain: every example's Source, loaded again under its
// name, is the same configuration, as a master's must be when it hands
// it to its next binary.
func TestSourceLoadsAgain(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	for _, f := range files {
		if filepath.Base(f) == "broken.yaml" {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			again, err := LoadBytes(cfg.SourceName, cfg.Source)
			if err != nil {
				t.Fatalf("loaded again: %v", err)
			}
			if !reflect.DeepEqual(cfg, again) {
				t.Errorf("loaded again:\n got %+v\nwant %+v", again, cfg)
			}
		})
	}
}

// wantErr is one expected error: its line, its key path, and a phrase the
// message must contain.
type wantErr struct {
	line int
	path string
	msg  string
}

// okListener is a valid listener line, for cases about something else.
const okListener = "  - {name: ok, listen: '127.0.0.1:1', upstream: ['127.0.0.1:2']}"

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []wantErr
	}{
		// Unknown keys, at every level.
		{"unknown top-level key", lines(
			"listners: []",
		), []wantErr{{1, "listners", `unknown key "listners" (did you mean "listeners"?)`}, {1, "listeners", "at least one listener"}}},
		{"unknown listener key", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: ['h:2']",
			"    conect_timeout: 5s",
		), []wantErr{{5, "listeners[0].conect_timeout", `did you mean "connect_timeout"`}}},
		{"unknown engine section lists the known ones", lines(
			"engines: {xdp: {enabled: true}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.xdp", "known keys: copy, pipe, sockmap, ip"}}},
		{"unknown proxy-specific section", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], grpc: {}}",
		), []wantErr{{2, "listeners[0].grpc", `unknown key "grpc"`}}},
		{"section of another proxy kind", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], socks5: {}}",
		), []wantErr{{2, "listeners[0].socks5", `not used by proxy tcp`}}},

		{"negative threads", lines(
			"threads: -1",
			"listeners:", okListener,
		), []wantErr{{1, "threads", "must be 0 (one per CPU) or a count up to 4096, got -1"}}},
		{"threads past any host", lines(
			"threads: 100000",
			"listeners:", okListener,
		), []wantErr{{1, "threads", "got 100000"}}},
		{"memory settings out of range", lines(
			"memory: {detached_gc_percent: 200, detached_pairs: -1}",
			"listeners:", okListener,
		), []wantErr{
			{1, "memory.detached_gc_percent", "got 200"},
			{1, "memory.detached_pairs", "must not be negative"},
		}},
		{"workers written 0", lines(
			"workers: 0",
			"listeners:", okListener,
		), []wantErr{{1, "workers", "leave the key out for its default (one process)"}}},
		{"workers neither a count nor auto", lines(
			"workers: many",
			"listeners:", okListener,
		), []wantErr{{1, "workers", `must be a count of processes or auto, got "many"`}}},
		{"workers past any host", lines(
			"workers: 1000",
			"listeners:", okListener,
		), []wantErr{{1, "workers", "must be auto or a count up to 256, got 1000"}}},

		// Type errors.
		{"string where a duration is expected", lines(
			"shutdown_timeout: soon",
			"listeners:", okListener,
		), []wantErr{{1, "shutdown_timeout", `invalid duration "soon"`}}},
		{"string where an integer is expected", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], max_connections: many}",
		), []wantErr{{2, "listeners[0].max_connections", `expected an integer, got the string "many"`}}},
		{"quoted number where an integer is expected", lines(
			"engines: {ip: {max_pairs: '100'}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.max_pairs", `expected an integer, got the string "100"`}}},
		{"fraction where an integer is expected", lines(
			"engines: {ip: {max_pairs: 1.5}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.max_pairs", "expected an integer, got the number 1.5"}}},
		{"string where a list is expected", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: 10.0.0.1:80",
		), []wantErr{{4, "listeners[0].upstream", "expected a list, got the string \"10.0.0.1:80\" (write a list like [10.0.0.1:80])"}}},
		{"list where a string is expected", lines(
			"listeners:",
			"  - {name: [a, b], listen: ':1', upstream: ['h:2']}",
		), []wantErr{{2, "listeners[0].name", "expected a string, got a list"}}},
		{"yes is not a boolean", lines(
			"engines: {sockmap: {enabled: yes}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.sockmap.enabled", `expected true or false, got the string "yes"`}}},
		{"mapping where a list is expected", lines(
			"listeners:",
			"  name: a",
		), []wantErr{{2, "listeners", "expected a list, got a mapping"}}},
		{"listener item is not a mapping", lines(
			"listeners:",
			okListener,
			"  - plug",
		), []wantErr{{3, "listeners[1]", `expected a mapping with keys name, listen`}}},
		{"list where a duration is expected", lines(
			"shutdown_timeout: [30s]",
			"listeners:", okListener,
		), []wantErr{{1, "shutdown_timeout", "expected a duration like 5s, got a list"}}},
		{"merge key of a scalar", lines(
			"log: {<<: 5}",
			"listeners:", okListener,
		), []wantErr{{1, "log", "a merge key (<<) takes a mapping or a list of mappings, got the integer 5"}}},
		{"alias to its own container", lines(
			"log: &x {<<: *x}",
			"listeners:", okListener,
		), []wantErr{{1, "log", "refers to a value that contains it"}}},

		// Duplicates.
		{"duplicate key", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: ['h:2']",
			"    name: b",
		), []wantErr{{5, "listeners[0].name", `duplicate key "name" (first set on line 2)`}}},
		{"duplicate listener name", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2']}",
			"  - {name: a, listen: ':2', upstream: ['h:2']}",
		), []wantErr{{3, "listeners[1].name", `duplicate listener name "a" (first used by listeners[0] on line 2)`}}},
		{"duplicate listen address", lines(
			"listeners:",
			"  - {name: a, listen: '10.0.0.1:80', upstream: ['h:2']}",
			"  - {name: b, listen: '10.0.0.1:80', upstream: ['h:2']}",
		), []wantErr{{3, "listeners[1].listen", "is the same address as 10.0.0.1:80 of listeners[0] on line 2"}}},
		{"wildcard overlaps a specific address", lines(
			"listeners:",
			"  - {name: a, listen: '10.0.0.1:80', upstream: ['h:2']}",
			"  - {name: b, listen: '0.0.0.0:80', upstream: ['h:2']}",
		), []wantErr{{3, "listeners[1].listen", "0.0.0.0:80 overlaps 10.0.0.1:80 of listeners[0]"}}},
		{"empty host overlaps IPv6", lines(
			"listeners:",
			"  - {name: a, listen: '[fd00::1]:80', upstream: ['h:2']}",
			"  - {name: b, listen: ':80', upstream: ['h:2']}",
		), []wantErr{{3, "listeners[1].listen", "overlaps"}}},

		// The admin address against the listeners': run binds the
		// listeners, then fails on the admin endpoint.
		{"admin on a listener's address", lines(
			"admin: 127.0.0.1:9901",
			"listeners:",
			"  - {name: a, listen: '127.0.0.1:9901', upstream: ['h:2']}",
		), []wantErr{{1, "admin", "admin address 127.0.0.1:9901 is the same address as listen address 127.0.0.1:9901 of listeners[0] on line 3; both cannot be bound"}}},
		{"admin under a wildcard listener", lines(
			"admin: 127.0.0.1:9901",
			"listeners:", okListener,
			"  - {name: all, listen: '0.0.0.0:9901', upstream: ['h:2']}",
		), []wantErr{{1, "admin", "admin address 127.0.0.1:9901 overlaps listen address 0.0.0.0:9901 of listeners[1] on line 4"}}},
		{"admin on localhost, a listener on 127.0.0.1", lines(
			"admin: localhost:9901",
			"listeners:",
			"  - {name: a, listen: '127.0.0.1:9901', upstream: ['h:2']}",
		), []wantErr{{1, "admin", "is the same address as listen address 127.0.0.1:9901 of listeners[0]"}}},
		{"admin on a name, a listener on every address", lines(
			"admin: node1.example:9901",
			"admin_token: s3cret",
			"listeners:",
			"  - {name: a, listen: ':9901', upstream: ['h:2']}",
		), []wantErr{{1, "admin", "admin address node1.example:9901 overlaps listen address :9901 of listeners[0]"}}},
		{"admin on every address, a listener on one", lines(
			"admin: '[::]:9901'",
			"admin_token: s3cret",
			"listeners:",
			"  - {name: a, listen: '10.0.0.1:9901', upstream: ['h:2']}",
		), []wantErr{{1, "admin", "overlaps listen address 10.0.0.1:9901"}}},

		// Admin beyond loopback without a token.
		{"admin on every address without a token", lines(
			"admin: 0.0.0.0:9901",
			"listeners:", okListener,
		), []wantErr{{1, "admin", `"0.0.0.0:9901" is reachable beyond this host and no admin_token is set`}}},
		{"admin on an empty host without a token", lines(
			"admin: ':9901'",
			"listeners:", okListener,
		), []wantErr{{1, "admin", "no admin_token is set"}}},
		{"admin on a name without a token", lines(
			"admin: node1.example:9901",
			"listeners:", okListener,
		), []wantErr{{1, "admin", "no admin_token is set"}}},
		{"admin token twice", lines(
			"admin: 0.0.0.0:9901",
			"admin_token: s3cret",
			"admin_token_file: /run/secrets/token",
			"listeners:", okListener,
		), []wantErr{{3, "admin_token_file", "not both"}}},

		// Addresses.
		{"missing port", lines(
			"admin: 127.0.0.1",
			"listeners:", okListener,
		), []wantErr{{1, "admin", `bad address "127.0.0.1": missing port`}}},
		{"IPv6 without brackets", lines(
			"listeners:",
			"  - {name: a, listen: '::1:80', upstream: ['h:2']}",
		), []wantErr{{2, "listeners[0].listen", "write IPv6 addresses in brackets"}}},
		{"port out of range", lines(
			"listeners:",
			"  - {name: a, listen: ':70000', upstream: ['h:2']}",
		), []wantErr{{2, "listeners[0].listen", `bad port "70000"`}}},
		{"named port", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:http']}",
		), []wantErr{{2, "listeners[0].upstream[0]", `bad port "http" in "h:http": expected a number from 1 to 65535`}}},
		{"upstream port 0", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2', 'h:0']}",
		), []wantErr{{2, "listeners[0].upstream[1]", `bad port "0"`}}},
		{"upstream without host", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: [':80']}",
		), []wantErr{{2, "listeners[0].upstream[0]", "missing host"}}},
		{"invalid IPv4 is not taken for a name", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['10.0.0.256:80']}",
		), []wantErr{{2, "listeners[0].upstream[0]", "neither an IP address nor a host name"}}},
		{"host name where listen needs an IP", lines(
			"listeners:",
			"  - {name: a, listen: 'localhost:80', upstream: ['h:2']}",
		), []wantErr{{2, "listeners[0].listen", `host "localhost" is not an IP address`}}},

		// Durations and sizes.
		{"duration without unit", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], connect_timeout: 5}",
		), []wantErr{{2, "listeners[0].connect_timeout", `invalid duration "5": missing unit`}}},
		{"duration with unknown unit", lines(
			"engines: {ip: {time_wait: 60sec}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.time_wait", `unknown unit "sec"`}}},
		{"negative duration", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], splice_after: -1s}",
		), []wantErr{{2, "listeners[0].splice_after", "must not be negative"}}},
		{"negative response timeout", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-forward, http: {response_timeout: -5s}}",
		), []wantErr{{2, "listeners[0].http.response_timeout", "must not be negative"}}},
		{"max_fails where nothing dials a list", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: socks5, socks5: {auth: none}, max_fails: 2}",
		), []wantErr{{2, "listeners[0].max_fails", "max_fails is not used by proxy socks5"}}},
		{"negative max_fails", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], max_fails: -1, fail_timeout: -1s}",
		), []wantErr{{2, "listeners[0].max_fails", "expected 0 (never skip a server) to 1000, got -1"}, {2, "listeners[0].fail_timeout", "must not be negative"}}},
		{"bad weights and balance of a list", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: [{address: 'h:2', weight: 0}, {address: 'h:3', weight: 0}], balance: random}",
			"  - {name: b, listen: ':2', proxy: filter, upstream: [{address: 'h:2', weight: -1}, 'h:3'], balance: least_conn}",
			"  - {name: c, listen: ':3', proxy: http-forward, balance: least_conn}",
		), []wantErr{
			{2, "listeners[0].upstream", "every server has weight 0"},
			{2, "listeners[0].balance", `unknown value "random" (allowed: round_robin, least_conn, consistent_hash)`},
			{3, "listeners[1].upstream[0].weight", "expected 0 (the server takes nothing) to 256, got -1"},
			{4, "listeners[2].balance", "balance is not used by proxy http-forward"},
		}},
		{"only backups", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: [{address: 'h:2', backup: true}]}",
			"  - {name: b, listen: ':2', upstream: ['h:1', {address: 'h:2', backup: true}]}",
		), []wantErr{{2, "listeners[0].upstream", "every server is a backup"}}},
		{"bad health check host", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], health_check: {host: app.example, interval: 2s, timeout: 1s}}",
			"  - {name: b, listen: ':2', upstream: ['h:2'], health_check: {path: /, host: \"a\\r\\nX-Evil: 1\", interval: 2s, timeout: 1s}}",
		), []wantErr{
			{2, "listeners[0].health_check.host", "give a path too"},
			{3, "listeners[1].health_check.host", "no host: spaces and control characters are not allowed"},
		}},
		{"bad fall and rise", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], health_check: {interval: 2s, timeout: 1s, fall: 0, rise: 101}}",
			"  - {name: b, listen: ':2', upstream: ['h:2'], health_check: {interval: 2s, timeout: 1s, fall: 3, rise: 2}}",
		), []wantErr{
			{2, "listeners[0].health_check.fall", "must be greater than 0; leave the key out for its default (1)"},
			{2, "listeners[0].health_check.rise", "expected 1 to 100 checks in a row, got 101"},
		}},
		{"negative max_conns", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: [{address: 'h:2', max_conns: -1}]}",
		), []wantErr{{2, "listeners[0].upstream[0].max_conns", "expected 0 (no bound) to 16777216, got -1"}}},
		{"queue_timeout where nothing is ever full", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], queue_timeout: 5s}",
			"  - {name: b, listen: ':2', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, servers: ['h:2'], queue_timeout: 5s}]}",
			"  - {name: c, listen: ':3', upstream: [{address: 'h:2', max_conns: 10}], queue_timeout: -1s}",
			"  - {name: d, listen: ':4', proxy: http-forward, queue_timeout: 5s}",
			"  - {name: e, listen: ':5', upstream: [{address: 'h:2', max_conns: 10}], queue_timeout: 0s}",
		), []wantErr{
			{2, "listeners[0].queue_timeout", "waits for a full server to free a place, but no server here has max_conns: nothing is ever full"},
			{3, "listeners[1].pools[0].queue_timeout", "waits for a full server to free a place, but no server here has max_conns"},
			{4, "listeners[2].queue_timeout", "must not be negative, got -1s"},
			{5, "listeners[3].queue_timeout", "queue_timeout is not used by proxy http-forward"},
			{6, "listeners[4].queue_timeout", "must be greater than 0; leave the key out for its default (none: refused at once)"},
		}},
		{"max_queue without a queue, negative, or where not used", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: [{address: 'h:2', max_conns: 10}], max_queue: 5}",
			"  - {name: b, listen: ':2', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, servers: [{address: 'h:2', max_conns: 1}], queue_timeout: 5s, max_queue: -1}]}",
			"  - {name: c, listen: ':3', proxy: socks5, socks5: {auth: none}, max_queue: 5}",
			"  - {name: d, listen: ':4', upstream: [{address: 'h:2', max_conns: 10}], queue_timeout: 5s, max_queue: 5}",
		), []wantErr{
			{2, "listeners[0].max_queue", "bounds the queue of queue_timeout, which is not set: no client ever waits"},
			{3, "listeners[1].pools[0].max_queue", "expected a count of waiting clients (0: no bound), got -1"},
			{4, "listeners[2].max_queue", "max_queue is not used by proxy socks5"},
		}},
		{"negative max_fails in a pool", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, servers: ['h:2'], max_fails: -1}]}",
		), []wantErr{{2, "listeners[0].pools[0].max_fails", "expected 0 (never skip a server) to 1000, got -1"}}},
		{"health_check where nothing dials a list", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-forward, health_check: {interval: 1s, timeout: 1s}}",
		), []wantErr{{2, "listeners[0].health_check", "health_check is not used by proxy http-forward"}}},
		{"bad health_check of a list", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], health_check: {path: health, interval: 1s, timeout: 2s}}",
		), []wantErr{{2, "listeners[0].health_check.path", "starting with /"}, {2, "listeners[0].health_check.timeout", "must not be longer than interval"}}},
		{"negative max body bytes", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-forward, http: {max_body_bytes: -1}}",
		), []wantErr{{2, "listeners[0].http.max_body_bytes", `invalid size "-1"`}}},
		{"zeros that would silently mean the default", lines(
			"listeners:",
			"  - {name: a, listen: ':1', proxy: http-forward, http: {response_timeout: 0s, header_timeout: 0, max_headers: 0, max_header_bytes: 0, keepalive_timeout: 1m}}",
			"  - {name: b, listen: ':2', upstream: ['h:2'], fail_timeout: 0s, max_fails: 0}",
			"  - {name: c, listen: ':3', proxy: socks5, socks5: {auth: none, handshake_timeout: 0s}}",
			"  - {name: d, listen: ':4', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, servers: ['h:2']}], upstream_pool: {idle_timeout: 0s}, http: {body_timeout: ~}}",
		), []wantErr{
			{2, "listeners[0].http.response_timeout", "must be greater than 0; leave the key out for its default (1m0s)"},
			{2, "listeners[0].http.header_timeout", "must be greater than 0; leave the key out for its default (10s)"},
			{2, "listeners[0].http.max_headers", "leave the key out for its default (100)"},
			{2, "listeners[0].http.max_header_bytes", "leave the key out for its default (32KiB)"},
			{3, "listeners[1].fail_timeout", "leave the key out for its default (10s)"},
			{4, "listeners[2].socks5.handshake_timeout", "leave the key out for its default (10s)"},
			{5, "listeners[3].upstream_pool.idle_timeout", "leave the key out for its default (4s)"},
		}},
		{"zero connect timeout", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], connect_timeout: 0s}",
		), []wantErr{{2, "listeners[0].connect_timeout", "must be greater than 0"}}},
		{"decimal size unit", lines(
			"engines: {copy: {buffer_size: 64KB}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.copy.buffer_size", `unknown unit "KB"`}}},
		{"fractional size", lines(
			"engines: {pipe: {pipe_size: 1.5MiB}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.pipe.pipe_size", `unknown unit ".5MiB"`}}},
		{"zero size", lines(
			"engines: {pipe: {pipe_size: 0}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.pipe.pipe_size", "must be between 1 byte and 1GiB"}}},
		{"negative integer", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], max_connections: -1}",
		), []wantErr{{2, "listeners[0].max_connections", "must be 0 (unlimited) or more"}}},

		// Enums.
		{"unknown log level", lines(
			"log: {level: verbose}",
			"listeners:", okListener,
		), []wantErr{{1, "log.level", `unknown value "verbose" (allowed: debug, info, warn, error)`}}},
		{"unknown log format", lines(
			"log: {format: xml}",
			"listeners:", okListener,
		), []wantErr{{1, "log.format", "(allowed: text, json)"}}},
		{"access log format misspelt", lines(
			"access_log: {path: /var/log/splicer/access.log, format: combind}",
			"listeners:", okListener,
		), []wantErr{{1, "access_log.format", `unknown value "combind" (allowed: text, json, combined)`}}},
		{"access log format key misspelt", lines(
			"access_log: {path: /var/log/splicer/access.log, fromat: combined}",
			"listeners:", okListener,
		), []wantErr{{1, "access_log.fromat", `unknown key "fromat" (did you mean "format"?)`}}},
		{"combined is for the access log only", lines(
			"log: {format: combined}",
			"listeners:", okListener,
		), []wantErr{{1, "log.format", `unknown value "combined" (allowed: text, json)`}}},
		{"unknown engine", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], engine: splice}",
		), []wantErr{{2, "listeners[0].engine", `unknown engine "splice" (allowed: auto, ip, sockmap, pipe, copy)`}}},
		{"unknown proxy", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], proxy: udp}",
		), []wantErr{{2, "listeners[0].proxy", `unknown proxy "udp" (allowed: tcp,`}}},
		{"ip engine switched off", lines(
			"engines: {ip: {enabled: false}}",
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], engine: ip}",
		), []wantErr{{3, "listeners[0].engine", "engines.ip.enabled: false"}}},
		{"no room for flows", lines(
			"engines: {ip: {max_pairs: 0}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.max_pairs", "must be at least 1"}}},
		{"relative pin directory", lines(
			"engines: {ip: {pin_dir: bpf/splicer}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.pin_dir", `must be an absolute path (a directory in a BPF file system) or "off", got "bpf/splicer"`}}},
		{"negative minimum body", lines(
			"engines: {ip: {min_body: -1}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.min_body", `invalid size "-1"`}}},
		{"local ports not a range", lines(
			"engines: {ip: {local_ports: 40000}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.local_ports", `must be a port range LOW-HIGH or "off", got "40000"`}}},
		{"local ports reversed", lines(
			"engines: {ip: {local_ports: 50000-40000}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.local_ports", "1024 <= LOW <= HIGH <= 65535"}}},
		{"local ports privileged", lines(
			"engines: {ip: {local_ports: 80-2000}}",
			"listeners:", okListener,
		), []wantErr{{1, "engines.ip.local_ports", "1024 <= LOW <= HIGH <= 65535"}}},
		{"bad host name", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['-bad-.example:80']}",
		), []wantErr{{2, "listeners[0].upstream[0]", "neither an IP address nor a host name"}}},
		{"engine switched off", lines(
			"engines: {sockmap: {enabled: false}}",
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:2'], engine: sockmap}",
		), []wantErr{{3, "listeners[0].engine", "engines.sockmap.enabled: false"}}},

		// Missing required keys are reported on the listener's item.
		{"missing name and listen", lines(
			"listeners:",
			"  - upstream: ['h:2']",
			"    engine: copy",
		), []wantErr{
			{2, "listeners[0].name", `missing required key "name"`},
			{2, "listeners[0].listen", `missing required key "listen"`},
		}},
		{"missing upstream", lines(
			"listeners:",
			okListener,
			"",
			"  - name: a",
			"    listen: ':3'",
		), []wantErr{{4, "listeners[1].upstream", "proxy tcp needs at least one upstream"}}},
		{"empty upstream list", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: []}",
		), []wantErr{{2, "listeners[0].upstream", "at least one upstream"}}},
		{"name with a space", lines(
			"listeners:",
			"  - {name: 'my plug', listen: ':1', upstream: ['h:2']}",
		), []wantErr{{2, "listeners[0].name", "may only contain"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, tc.data), tc.want)
		})
	}
}

// checkErrors asserts that got is exactly want, in order.
func checkErrors(tb testing.TB, got Errors, want []wantErr) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Line != w.line || g.Path != w.path || !strings.Contains(g.Msg, w.msg) {
			tb.Errorf("error %d = %v\nwant line %d, path %s, message containing %q", i, g, w.line, w.path, w.msg)
		}
		if g.File != "test.yaml" && g.File != "" {
			tb.Errorf("error %d names file %q", i, g.File)
		}
	}
}

func TestParseReportsAllErrorsInLineOrder(t *testing.T) {
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: a",
		"    listen: 10.0.0.1",
		"    upstream: ['h:2']",
		"    engine: fast",
		"  - name: a",
		"    listen: ':2'",
		"    upstream: ['h']",
		"log: {level: loud}",
		"admin: 1",
	))
	checkErrors(t, errs, []wantErr{
		{3, "listeners[0].listen", "missing port"},
		{5, "listeners[0].engine", `unknown engine "fast"`},
		{6, "listeners[1].name", "duplicate listener name"},
		{8, "listeners[1].upstream[0]", "missing port"},
		{9, "log.level", `unknown value "loud"`},
		{10, "admin", "missing port"},
	})
}

func TestParseDoesNotRepeatAnUndecodableValue(t *testing.T) {
	// A listener that is not a mapping has no name or listen to validate:
	// one error, not three.
	errs := parseErrors(t, lines("listeners: [plug]"))
	checkErrors(t, errs, []wantErr{{1, "listeners[0]", "expected a mapping"}})
}

func TestParseEmptyFile(t *testing.T) {
	for _, data := range []string{"", "\n\n", "# only a comment\n", "---\n"} {
		errs := parseErrors(t, []byte(data))
		checkErrors(t, errs, []wantErr{{1, "listeners", "at least one listener is required"}})
	}
}

func TestParseNotYAML(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want wantErr
	}{
		{"bad indentation", lines(
			"admin: ':1'",
			"log:",
			"  level: info",
			" format: text",
		), wantErr{4, "", "invalid YAML"}},
		{"tab indentation", lines(
			"log:",
			"\tlevel: info",
		), wantErr{2, "", "invalid YAML: found character that cannot start any token"}},
		{"unclosed flow list", lines(
			"admin: ':1'",
			"",
			"listeners: [a, b",
		), wantErr{3, "", "invalid YAML: did not find expected ',' or ']'"}},
		{"unclosed quote", lines(
			"admin: ':1'",
			"log: {level: 'info}",
		), wantErr{2, "", "invalid YAML"}},
		{"binary", []byte("admin: ':1'\nlog: \x00\x01\x02\n"), wantErr{2, "", "invalid YAML: control characters are not allowed"}},
		{"undefined alias", lines(
			"admin: ':1'",
			"log: *nope",
		), wantErr{2, "", "unknown anchor 'nope'"}},
		{"two documents", lines(
			"admin: ':1'",
			"---",
			"admin: ':2'",
		), wantErr{2, "", "a second YAML document"}},
		{"prose", []byte("This is not a configuration file.\n"), wantErr{1, "", "expected a mapping with keys admin, log"}},
		{"a list", []byte("- a\n- b\n"), wantErr{1, "", "expected a mapping"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, tc.data), []wantErr{tc.want})
		})
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		err  Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Column: 7, Path: "log.level", Msg: "bad"}, "f.yaml:3:7: log.level: bad"},
		{Error{File: "f.yaml", Line: 3, Path: "log.level", Msg: "bad"}, "f.yaml:3: log.level: bad"},
		{Error{File: "f.yaml", Line: 3, Msg: "invalid YAML"}, "f.yaml:3: invalid YAML"},
		{Error{File: "config", Path: "listeners", Msg: "none"}, "config: listeners: none"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	errs := Errors{{File: "f", Line: 1, Msg: "a"}, {File: "f", Line: 2, Msg: "b"}}
	if got, want := errs.Error(), "f:1: a\nf:2: b"; got != want {
		t.Errorf("Errors.Error() = %q, want %q", got, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "splicer.yaml")
	if err := os.WriteFile(path, lines("listeners:", "  - {name: a, listen: ':1'}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].File != path || errs[0].Line != 2 {
		t.Errorf("Load(%s) = %v, want one error on line 2 naming the file", path, err)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want fs.ErrNotExist", err)
	}
}

// TestAdminBeyondLoopback: an admin address beyond loopback is accepted
// with a token, from the file or from admin_token_file, which Load reads
// relative to the configuration; loopback needs none.
func TestAdminBeyondLoopback(t *testing.T) {
	for _, admin := range []string{"127.0.0.1:9901", "'[::1]:9901'", "localhost:9901"} {
		mustParse(t, lines("admin: "+admin, "listeners:", okListener))
	}
	mustParse(t, lines("admin: 0.0.0.0:9901", "admin_token: s3cret", "listeners:", okListener))
	dir := t.TempDir()
	path := filepath.Join(dir, "splicer.yaml")
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("splicer.yaml", string(lines("admin: 0.0.0.0:9901", "admin_token_file: token", "listeners:", okListener)))
	write("token", "s3cret\n")
	cfg, err := Load(path)
	if err != nil || cfg.AdminToken != "s3cret" {
		t.Fatalf("Load with admin_token_file: token %q, %v; want s3cret", cfgToken(cfg), err)
	}
	write("token", "\n")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Load with an empty token file: %v, want an error saying it is empty", err)
	}
	os.Remove(filepath.Join(dir, "token"))
	if _, err := Load(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load with a missing token file: %v, want fs.ErrNotExist", err)
	}
}

// TestAdminBesideListeners: an admin address on another port, or another
// IP of the same port, or port 0, does not clash with a listener.
func TestAdminBesideListeners(t *testing.T) {
	for _, tc := range []struct{ admin, listen string }{
		{"127.0.0.1:9901", "127.0.0.1:9902"},
		{"127.0.0.1:9901", "127.0.0.2:9901"},
		{"localhost:9901", "127.0.0.2:9901"},
		{"127.0.0.1:0", "0.0.0.0:0"},
		{"node1.example:9901", "10.0.0.1:9901"},
	} {
		mustParse(t, lines("admin: "+tc.admin, "admin_token: s3cret", "listeners:",
			"  - {name: a, listen: '"+tc.listen+"', upstream: ['h:2']}"))
	}
}

func cfgToken(cfg *Config) string {
	if cfg == nil {
		return ""
	}
	return cfg.AdminToken
}

func TestValidateConfigBuiltInCode(t *testing.T) {
	cfg := Default()
	cfg.Listeners = []Listener{listenerWith("a", "127.0.0.1:80", "127.0.0.1:81")}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate of a good config: %v", err)
	}
	cfg.Listeners = append(cfg.Listeners, listenerWith("a", "127.0.0.1:80"))
	var errs Errors
	if err := cfg.Validate(); !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("Validate = %v, want 3 errors (name, listen, upstream)", err)
	}
	if errs[0].Path != "listeners[1].name" || errs[0].Line != 0 {
		t.Errorf("first error = %+v, want listeners[1].name without a line", errs[0])
	}
}

func TestProxyKindsCanBeExtended(t *testing.T) {
	data := lines("listeners:", "  - {name: a, listen: ':1', upstream: ['h:2'], proxy: quic}")
	parseErrors(t, data)

	saved := ProxyKinds
	ProxyKinds = append(ProxyKinds[:len(ProxyKinds):len(ProxyKinds)], "quic")
	t.Cleanup(func() { ProxyKinds = saved })
	if cfg := mustParse(t, data); cfg.Listeners[0].Proxy != "quic" {
		t.Errorf("proxy = %q", cfg.Listeners[0].Proxy)
	}
}

// TestPlannedProxyKind checks that a kind the schema reserves is told apart
// from a typo.
func TestPlannedProxyKind(t *testing.T) {
	saved := plannedProxyKinds
	plannedProxyKinds = []string{"quic"}
	t.Cleanup(func() { plannedProxyKinds = saved })
	errs := parseErrors(t, lines("listeners:", "  - {name: a, listen: ':1', upstream: ['h:2'], proxy: quic}"))
	if len(errs) != 1 || errs[0].Path != "listeners[0].proxy" || !strings.Contains(errs[0].Msg, `proxy "quic" is not implemented yet`) {
		t.Errorf("errors = %v, want one saying proxy quic is not implemented yet", errs)
	}
}

// FuzzParse checks that no input crashes Parse or yields both a Config and
// an error, and that what Parse accepts also passes Validate.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"tcp.yaml", "broken.yaml", "sni.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("listeners: &x [*x]"))
	f.Add([]byte("log: &x {<<: [*x, *x]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one of them", cfg, err)
		}
		if cfg != nil {
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Parse accepted a config Validate rejects: %v", err)
			}
		}
	})
}

// TestParseNestedMergeKeysAreExpandedOnce guards against a "billion laughs"
// of merge keys: each level merges the previous one ten times, so expanding
// every reference would take 10^12 steps and hang the test.
func TestParseNestedMergeKeysAreExpandedOnce(t *testing.T) {
	level := "&a0 {level: debug}"
	for i := 1; i <= 12; i++ {
		level = fmt.Sprintf("&a%d {<<: [%s%s]}", i, level, strings.Repeat(fmt.Sprintf(", *a%d", i-1), 9))
	}
	cfg := mustParse(t, lines("log: "+level, "listeners:", okListener))
	if cfg.Log.Level != "debug" {
		t.Errorf("log.level = %q, want debug from the innermost merge", cfg.Log.Level)
	}
}

func TestDefaultPinDir(t *testing.T) {
	for path, want := range map[string]string{
		"/etc/splicer/splicer.yaml": "/sys/fs/bpf/splicer/splicer",
		"edge.yml":                  "/sys/fs/bpf/splicer/edge",
		"/etc/splicer/conf":         "/sys/fs/bpf/splicer/conf",
		"":                          "/sys/fs/bpf/splicer/splicer",
	} {
		if got := DefaultPinDir(path); got != want {
			t.Errorf("DefaultPinDir(%q) = %q, want %q", path, got, want)
		}
	}
	if _, err := Parse("t.yaml", []byte("engines: {ip: {pin_dir: off}}\nlisteners:\n  - {name: a, listen: ':1', upstream: ['h:2']}\n")); err != nil {
		t.Errorf("pin_dir: off: %v", err)
	}
}

// TestLocalPorts: the default range parses; off switches it off. A
// listener may use a port of the range (the dialler skips a port it
// cannot bind).
func TestLocalPorts(t *testing.T) {
	lo, hi, on, err := Default().Engines.IP.PortRange()
	if err != nil || !on || lo != 40000 || hi != 59999 {
		t.Errorf("default local_ports: %d-%d %v %v", lo, hi, on, err)
	}
	cfg, err := Parse("t.yaml", []byte("engines: {ip: {local_ports: off}}\nlisteners:\n  - {name: a, listen: ':45000', upstream: ['h:2']}\n"))
	if err != nil {
		t.Fatalf("local_ports: off: %v", err)
	}
	if _, _, on, err := cfg.Engines.IP.PortRange(); on || err != nil {
		t.Errorf("local_ports: off is on (%v)", err)
	}
}

func TestWorkersCount(t *testing.T) {
	for _, tc := range []struct {
		line   string
		want   int
		master bool
	}{
		{"", 1, false},
		{"workers: 1", 1, false},
		{"workers: 3", 3, true},
		{"workers: auto", runtime.NumCPU(), runtime.NumCPU() > 1},
	} {
		cfg := mustParse(t, lines(tc.line, "listeners:", okListener))
		if got := cfg.Workers.Count(); got != tc.want || cfg.Workers.Master() != tc.master {
			t.Errorf("%q: %d workers (master %v), want %d (%v)", tc.line, got, cfg.Workers.Master(), tc.want, tc.master)
		}
	}
}

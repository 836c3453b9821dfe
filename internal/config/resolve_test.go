// The keys of servers found in DNS: resolve, srv and the resolver section, read and refused with clear errors.

package config

import (
	"strings"
	"testing"
	"time"
)

func TestResolveKeysRead(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: rev",
		"    listen: ':8080'",
		"    proxy: http-reverse",
		"    routes: [{pool: p}]",
		"    pools:",
		"      - name: p",
		"        resolver: {nameservers: ['10.0.0.53', '[2001:db8::53]:5353'], interval: 5s}",
		"        servers:",
		"          - {address: 'web.example:80', resolve: true, weight: 2}",
		"          - {srv: _http._tcp.api.example, backup: true}",
		"  - name: plain",
		"    listen: ':7000'",
		"    upstream: [{address: 'db.example:5432', resolve: true}]",
		"    resolver: {}",
	))
	pl := cfg.Listeners[0].Pools[0]
	if s := pl.Servers[0]; !s.Resolve || s.Address != "web.example:80" || s.Weight != 2 || !s.Resolves() {
		t.Errorf("server 0 = %+v, want web.example:80 resolved, weight 2", s)
	}
	if s := pl.Servers[1]; s.SRV != "_http._tcp.api.example" || !s.Backup || !s.Resolves() {
		t.Errorf("server 1 = %+v, want the SRV name as a backup", s)
	}
	if got := pl.Resolver.ResolveInterval(); got != 5*time.Second {
		t.Errorf("interval %s, want 5s", got)
	}
	if got := strings.Join(pl.Resolver.NameserverAddrs(), " "); got != "10.0.0.53:53 [2001:db8::53]:5353" {
		t.Errorf("nameservers %q, want port 53 filled in", got)
	}
	up := cfg.Listeners[1].UpstreamList()
	if up.Resolver == nil || up.Resolver.ResolveInterval() != DefaultResolveInterval || !up.Servers[0].Resolve {
		t.Errorf("upstream list %+v: want the listener's resolver, its default interval", up)
	}
}

func TestResolveKeysRefused(t *testing.T) {
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: rev",
		"    listen: ':8080'",
		"    proxy: http-reverse",
		"    routes: [{pool: p}, {pool: q}]",
		"    pools:",
		"      - name: p",
		"        resolver: {nameservers: ['dns.example', '10.0.0.53:99999'], interval: 100ms}",
		"        servers:",
		"          - {address: '10.0.0.1:80', resolve: true}",
		"          - {address: 'web.example:80', srv: _http._tcp.web.example}",
		"          - {srv: 'api.example:80'}",
		"          - {srv: 'api.example'}",
		"          - {weight: 1}",
		"      - name: q",
		"        resolver: {interval: 10s}",
		"        servers: ['web.example:80']",
		"  - name: fwd",
		"    listen: ':3128'",
		"    proxy: http-forward",
		"    resolver: {}",
	))
	want := []struct{ path, msg string }{
		{"listeners[0].pools[0].servers[0].resolve", "10.0.0.1:80 is an IP address: resolve is for a server given by name"},
		{"listeners[0].pools[0].servers[1].srv", "give address or srv, not both"},
		{"listeners[0].pools[0].servers[2].srv", "an SRV name has no port"},
		{"listeners[0].pools[0].servers[3].srv", "expected _service._proto.name"},
		{"listeners[0].pools[0].servers[4]", "missing required key \"address\" (host:port), or \"srv\""},
		{"listeners[0].pools[0].resolver.nameservers[0]", "\"dns.example\": expected an IP address"},
		{"listeners[0].pools[0].resolver.nameservers[1]", "\"10.0.0.53:99999\": expected an IP address"},
		{"listeners[0].pools[0].resolver.interval", "expected at least 1s, got 100ms"},
		{"listeners[0].pools[1].resolver", "no server has resolve: true or srv"},
		{"listeners[1].resolver", "resolver is not used by proxy http-forward"},
	}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || (e.Path == w.path && strings.Contains(e.Msg, w.msg))
		}
		if !found {
			t.Errorf("no error at %s saying %q; got:\n%v", w.path, w.msg, errs)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
}

// Tests of accept_proxy_protocol and proxy_protocol_from: what parses, and each mistake on its line.

package config

import (
	"slices"
	"testing"
)

func TestAcceptProxyProtocolParses(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: web",
		"    listen: ':8080'",
		"    proxy: http-reverse",
		"    accept_proxy_protocol: true",
		"    proxy_protocol_from: [10.99.1.0/24, 'fd99:1::2']",
		"    routes: [{pool: p}]",
		"    pools: [{name: p, servers: ['10.0.0.1:80']}]",
	))
	l := cfg.Listeners[0]
	if !l.AcceptProxyProtocol || !slices.Equal(l.ProxyProtocolFrom, []string{"10.99.1.0/24", "fd99:1::2"}) {
		t.Errorf("parsed accept %v from %v", l.AcceptProxyProtocol, l.ProxyProtocolFrom)
	}
}

func TestAcceptProxyProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want []wantErr
	}{
		{"accept without sources", lines(
			"listeners:",
			"  - {name: a, listen: ':1', upstream: ['h:1'], accept_proxy_protocol: true}",
		), []wantErr{{2, "listeners[0].proxy_protocol_from", "needs the CIDRs"}}},
		{"sources without accept", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: ['h:1']",
			"    proxy_protocol_from: [10.0.0.0/8]",
		), []wantErr{{5, "listeners[0].proxy_protocol_from", "only with accept_proxy_protocol"}}},
		{"bad CIDR", lines(
			"listeners:",
			"  - name: a",
			"    listen: ':1'",
			"    upstream: ['h:1']",
			"    accept_proxy_protocol: true",
			"    proxy_protocol_from:",
			"      - 10.0.0.0/8",
			"      - 10.0.0.300/8",
		), []wantErr{{8, "listeners[0].proxy_protocol_from[1]", "10.0.0.300"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, parseErrors(t, tc.data), tc.want) })
	}
}

// Tests of the tcp_keepalive section: defaults kept per key, off, and the kernel's bounds.

package config

import (
	"testing"
	"time"
)

func TestTCPKeepaliveKeepsTheDefaultOfEachKeyLeftOut(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', upstream: ['h:2'], tcp_keepalive: {idle: 30s, count: 3}}",
		"  - {name: b, listen: ':3', upstream: ['h:2'], tcp_keepalive: {idle: 0s}}",
		"  - {name: c, listen: ':4', upstream: ['h:2']}",
	))
	want := []TCPKeepalive{
		{Idle: Duration(30 * time.Second), Interval: Duration(15 * time.Second), Count: 3},
		{Idle: 0, Interval: Duration(15 * time.Second), Count: 9},
		{Idle: Duration(15 * time.Second), Interval: Duration(15 * time.Second), Count: 9},
	}
	for i, w := range want {
		if got := cfg.Listeners[i].TCPKeepalive; got != w {
			t.Errorf("listener %s: tcp_keepalive = %+v, want %+v", cfg.Listeners[i].Name, got, w)
		}
	}
	if cfg.Listeners[1].TCPKeepalive.On() || !cfg.Listeners[0].TCPKeepalive.On() {
		t.Errorf("idle 0 must switch keepalive off, and only it")
	}
}

func TestTCPKeepaliveOutsideTheKernelsBoundsIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		want          []wantErr
	}{
		{"negative idle", "{idle: -1s}", []wantErr{{2, "listeners[0].tcp_keepalive.idle", "must not be negative"}}},
		{"fractions of a second", "{idle: 1500ms, interval: 2500ms}", []wantErr{
			{2, "listeners[0].tcp_keepalive.idle", "must be whole seconds (the kernel counts keepalive in seconds), got 1.5s; try 2s"},
			{2, "listeners[0].tcp_keepalive.interval", "must be whole seconds"},
		}},
		{"no interval", "{interval: 0s}", []wantErr{{2, "listeners[0].tcp_keepalive.interval", "must be from 1s to 32767s, got 0s"}}},
		{"idle past the kernel's", "{idle: 10h}", []wantErr{{2, "listeners[0].tcp_keepalive.idle", "must be from 1s to 32767s, got 10h0m0s"}}},
		{"no probe", "{count: 0}", []wantErr{{2, "listeners[0].tcp_keepalive.count", "must be from 1 to 127 probes, got 0"}}},
		{"too many probes", "{count: 128}", []wantErr{{2, "listeners[0].tcp_keepalive.count", "got 128"}}},
		{"misspelt key", "{intervall: 5s}", []wantErr{{2, "listeners[0].tcp_keepalive.intervall", `did you mean "interval"`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, lines(
				"listeners:",
				"  - {name: a, listen: ':1', upstream: ['h:2'], tcp_keepalive: "+tc.section+"}",
			)), tc.want)
		})
	}
}

func TestTCPKeepaliveOffChecksNothingElse(t *testing.T) {
	// With idle 0 the interval and count are never used: a stale value
	// left beside it is no error.
	cfg := mustParse(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', upstream: ['h:2'], tcp_keepalive: {idle: 0s, interval: 0s, count: 0}}",
	))
	if cfg.Listeners[0].TCPKeepalive.On() {
		t.Errorf("tcp_keepalive on with idle 0")
	}
}

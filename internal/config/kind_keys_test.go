// Listener keys a built-in kind would ignore are refused on their line.

package config

import (
	"strings"
	"testing"
)

func TestKeysAKindIgnores(t *testing.T) {
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: rev",
		"    listen: ':8080'",
		"    proxy: http-reverse",
		"    upstream: ['h:80']",
		"    splice_after: 1s",
		"    pools: [{name: p, servers: ['h:80']}]",
		"    routes: [{pool: p}]",
		"  - name: fwd",
		"    listen: ':3128'",
		"    proxy: http-forward",
		"    upstream: ['h:80']",
		"  - name: plain",
		"    listen: ':7000'",
		"    upstream: ['h:80']",
		"    splice_after: 1s",
		"    proxy_protocol: v1",
	))
	want := []struct {
		line int
		path string
	}{
		{5, "listeners[0].upstream"},
		{6, "listeners[0].splice_after"},
		{12, "listeners[1].upstream"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if errs[i].Line != w.line || errs[i].Path != w.path || !strings.Contains(errs[i].Msg, "is not used by proxy") {
			t.Errorf("error %d = %v, want line %d, %s, not used by the proxy", i, errs[i], w.line, w.path)
		}
	}
}

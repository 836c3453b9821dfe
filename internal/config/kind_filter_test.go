// Tests of the filter section: patterns parse, bad patterns and a missing upstream are reported on their lines; and of the http section a filter listener reads.

package config

import (
	"slices"
	"strings"
	"testing"
)

func TestFilterSectionParses(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: f",
		"    listen: 10.99.1.1:8081",
		"    proxy: filter",
		"    upstream: [10.99.2.2:80]",
		"    filter:",
		"      block_paths: ['/admin/*', '*.exe']",
		"      block_content_types: ['image/*']",
	))
	f := cfg.Listeners[0].Filter
	if f == nil || !slices.Equal(f.BlockPaths, []string{"/admin/*", "*.exe"}) || !slices.Equal(f.BlockContentTypes, []string{"image/*"}) {
		t.Errorf("filter section = %+v", f)
	}
}

func TestFilterSectionErrors(t *testing.T) {
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: f",
		"    listen: 10.99.1.1:8081",
		"    proxy: filter",
		"    filter:",
		"      block_paths: ['/ok', '[a-']",
		"      block_content_types: ['']",
		"  - {name: t, listen: ':2', upstream: ['h:1'], filter: {}}",
	))
	want := []struct {
		line       int
		path, text string
	}{
		{2, "listeners[0].upstream", "needs at least one upstream"},
		{6, "listeners[0].filter.block_paths[1]", "bad pattern"},
		{7, "listeners[0].filter.block_content_types[0]", "empty pattern"},
		{8, "listeners[1].filter", "not used by proxy tcp"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if e := errs[i]; e.Line != w.line || e.Path != w.path || !strings.Contains(e.Msg, w.text) {
			t.Errorf("error %d = %v, want line %d, %s, containing %q", i, e, w.line, w.path, w.text)
		}
	}
}

// TestFilterHTTPSection: a filter listener's http section is checked as
// the HTTP kinds' are, and the keys the filter would ignore are refused,
// each error naming its key; the keys it reads are taken.
func TestFilterHTTPSection(t *testing.T) {
	head := []string{"listeners:", "  - name: f", "    listen: ':1'", "    proxy: filter", "    upstream: ['h:1']", "    http:"}
	cfg := mustParse(t, lines(append(head, "      header_timeout: 2s", "      max_headers: 50", "      max_body_bytes: 1MiB")...))
	if h := cfg.Listeners[0].HTTP; h == nil || h.HeaderTimeout.Std() != 2e9 || h.MaxHeaders != 50 || h.MaxBodyBytes != 1<<20 {
		t.Errorf("filter's http section = %+v", h)
	}
	checkErrors(t, parseErrors(t, lines(append(head,
		"      header_timeout: 0",
		"      request_timeout: -1s",
		"      max_headers: 0",
		"      max_header_bytes: 0",
		"      connect_ports: [443]",
		"      body_min_rate: 100",
		"      trusted_proxies: [10.0.0.0/8]",
		"      cache_bytes: 1MiB",
		"      body_timeout: soon",
		"      keepalive_timout: 5s",
	)...)), []wantErr{
		{7, "listeners[0].http.header_timeout", "must be greater than 0"},
		{8, "listeners[0].http.request_timeout", "must not be negative"},
		{9, "listeners[0].http.max_headers", "must be greater than 0"},
		{10, "listeners[0].http.max_header_bytes", "must be greater than 0"},
		{11, "listeners[0].http.connect_ports", "connect_ports is not used by proxy filter (it is for: [http-forward])"},
		{12, "listeners[0].http.body_min_rate", "body_min_rate is not used by proxy filter"},
		{13, "listeners[0].http.trusted_proxies", "trusted_proxies is not used by proxy filter (it is for: [http-reverse])"},
		{14, "listeners[0].http.cache_bytes", "cache_bytes is not used by proxy filter"},
		{15, "listeners[0].http.body_timeout", `invalid duration "soon"`},
		{16, "listeners[0].http.keepalive_timout", `unknown key "keepalive_timout"`},
	})
}

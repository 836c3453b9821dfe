// Tests of the filter section: patterns parse, bad patterns and a missing upstream are reported on their lines.

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

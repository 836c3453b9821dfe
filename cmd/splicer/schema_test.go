// splicer schema prints JSON that has every key of docs/configuration.md and the engines this binary has.

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/splicer/splicer/engine/all"
)

func TestSchemaCommand(t *testing.T) {
	out, stderr, code := splicer(t, "schema")
	if code != 0 {
		t.Fatalf("splicer schema: exit %d: %s", code, stderr)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(out), &schema); err != nil {
		t.Fatalf("splicer schema printed no JSON: %v\n%s", err, out)
	}
	keys := referenceKeys(t)
	for _, k := range keys {
		if schemaKey(schema, k) == nil {
			t.Errorf("docs/configuration.md names %s; splicer schema does not", k)
		}
	}
	var engines []string
	for _, v := range anyOfWith(schemaKey(schema, "listeners[].engine"), "enum")["enum"].([]any) {
		if s, ok := v.(string); ok {
			engines = append(engines, s)
		}
	}
	for _, e := range append(all.Names(), "auto") {
		if !slices.Contains(engines, e) {
			t.Errorf("listeners[].engine offers %v, not engine %s", engines, e)
		}
	}
}

func TestSchemaCommandTakesNoArguments(t *testing.T) {
	if _, stderr, code := splicer(t, "schema", "extra"); code == 0 || !strings.Contains(stderr, "Usage: splicer schema") {
		t.Errorf("splicer schema extra: exit %d, stderr %q; want a usage and a failure", code, stderr)
	}
}

// referenceKeys are the key paths in the first column of
// docs/configuration.md's tables.
func referenceKeys(tb testing.TB) []string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		tb.Fatal(err)
	}
	var keys []string
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			key, _, _ := strings.Cut(rest, "`")
			keys = append(keys, key)
		}
	}
	if len(keys) < 100 {
		tb.Fatalf("docs/configuration.md: only %d keys found", len(keys))
	}
	return keys
}

// schemaKey follows a key path (listeners[].http.body_timeout) through
// the schema's properties and items; nil where it leads nowhere.
func schemaKey(s map[string]any, path string) map[string]any {
	for seg := range strings.SplitSeq(path, ".") {
		name, list := strings.CutSuffix(seg, "[]")
		s, _ = anyOfWith(s, "properties")["properties"].(map[string]any)
		s, _ = s[name].(map[string]any)
		if list {
			s, _ = anyOfWith(s, "items")["items"].(map[string]any)
		}
	}
	return s
}

// anyOfWith returns s, or the branch of its anyOf, that has keyword kw.
func anyOfWith(s map[string]any, kw string) map[string]any {
	if _, ok := s[kw]; ok {
		return s
	}
	branches, _ := s["anyOf"].([]any)
	for _, b := range branches {
		if m, ok := b.(map[string]any); ok {
			if found := anyOfWith(m, kw); found != nil {
				return found
			}
		}
	}
	return nil
}

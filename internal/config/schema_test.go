// The JSON Schema has every key the decoder accepts, and accepts the example files that splicer accepts.

package config

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// parsedSchema is JSONSchema parsed back from its JSON.
func parsedSchema(tb testing.TB) map[string]any {
	tb.Helper()
	b, err := JSONSchema()
	if err != nil {
		tb.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		tb.Fatalf("JSONSchema is not JSON: %v", err)
	}
	return s
}

// schemaAt follows a key path through the schema's properties, a list's
// items and the branches of anyOf; nil where the path leads nowhere.
func schemaAt(s map[string]any, path string) map[string]any {
	for seg := range strings.SplitSeq(path, ".") {
		name, list := strings.CutSuffix(seg, "[]")
		s, _ = branchWith(s, "properties")["properties"].(map[string]any)
		s, _ = s[name].(map[string]any)
		if list {
			s, _ = branchWith(s, "items")["items"].(map[string]any)
		}
	}
	return s
}

// branchWith returns s, or the branch of its anyOf, that has the
// keyword kw.
func branchWith(s map[string]any, kw string) map[string]any {
	if _, ok := s[kw]; ok {
		return s
	}
	branches, _ := s["anyOf"].([]any)
	for _, b := range branches {
		if m, ok := b.(map[string]any); ok {
			if found := branchWith(m, kw); found != nil {
				return found
			}
		}
	}
	return nil
}

func TestSchemaHasEveryKey(t *testing.T) {
	s := parsedSchema(t)
	if s["$schema"] != SchemaID {
		t.Errorf("$schema = %v, want %s", s["$schema"], SchemaID)
	}
	for _, k := range keys() {
		at := schemaAt(s, k.path)
		if at == nil {
			t.Errorf("the schema has no %s", k.path)
			continue
		}
		if inner, _ := sectionOf(k.typ); inner != nil {
			obj := branchWith(at, "properties")
			if list := branchWith(at, "items"); list != nil {
				obj = branchWith(list["items"].(map[string]any), "properties")
			}
			if obj == nil || obj["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties is not false, but the decoder refuses unknown keys", k.path)
			}
		}
	}
}

// TestSchemaEnumsAndDefaults: the enumerated keys offer the values the
// validator takes, engine names as registered, and the defaults are the
// code's.
func TestSchemaEnumsAndDefaults(t *testing.T) {
	s := parsedSchema(t)
	enum := func(path string) []string {
		var out []string
		for _, v := range branchWith(schemaAt(s, path), "enum")["enum"].([]any) {
			if v != nil { // an empty value: the default
				out = append(out, v.(string))
			}
		}
		return out
	}
	if got := enum("listeners[].engine"); !slices.Equal(got, EngineNames) || !slices.Contains(got, "ip") {
		t.Errorf("listeners[].engine enum = %v, want %v", got, EngineNames)
	}
	if got := enum("listeners[].proxy"); !slices.Contains(got, "http-reverse") || !slices.Equal(got, ProxyKinds) {
		t.Errorf("listeners[].proxy enum = %v, want %v", got, ProxyKinds)
	}
	for path, want := range map[string]any{
		"shutdown_timeout":                     "30s",
		"engines.copy.buffer_size":             "64KiB",
		"listeners[].http.body_min_rate":       float64(500),
		"listeners[].http.keepalive_timeout":   "1m15s",
		"listeners[].max_connections":          float64(10000),
		"engines.sockmap.enabled":              true,
		"listeners[].pools[].servers[].weight": float64(1),
	} {
		if got := schemaAt(s, path)["default"]; got != want {
			t.Errorf("%s: default %v (%T), want %v", path, got, got, want)
		}
	}
}

// TestSchemaAcceptsExamples validates every example file, as JSON, with
// python3's jsonschema where it is installed: those splicer accepts
// pass, and broken.yaml's mistakes of shape are found.
func TestSchemaAcceptsExamples(t *testing.T) {
	if err := exec.Command("python3", "-c", "import jsonschema").Run(); err != nil {
		t.Skip("python3 with jsonschema is not installed (Debian: python3-jsonschema)")
	}
	dir := t.TempDir()
	b, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	schemaFile := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schemaFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(examplePath("*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	files := make([]string, len(examples))
	for i, ex := range examples {
		files[i] = yamlAsJSON(t, ex, dir)
	}
	problems := validateWithPython(t, schemaFile, files)
	for i, ex := range examples {
		got := problems[files[i]]
		if filepath.Base(ex) == "broken.yaml" {
			for _, want := range []string{"conect_timeout", "64KB", "verbose", "lots", "'splice'", "$.shutdown_timeout", "'name' is a required property"} {
				if !strings.Contains(got, want) {
					t.Errorf("broken.yaml: the schema finds no problem with %q; it found:\n%s", want, got)
				}
			}
			continue
		}
		if _, err := Load(ex); err != nil {
			t.Errorf("%s: splicer refuses it: %v", ex, err)
		}
		if got != "" {
			t.Errorf("%s: splicer accepts it, the schema does not:\n%s", ex, got)
		}
	}
}

// yamlAsJSON writes the YAML file at path as JSON in dir (aliases and
// merge keys resolved, as an editor's YAML support does) and returns
// the JSON file's path.
func yamlAsJSON(tb testing.TB, path, dir string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		tb.Fatalf("%s as JSON: %v", path, err)
	}
	out := filepath.Join(dir, filepath.Base(path)+".json")
	if err := os.WriteFile(out, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return out
}

// validateWithPython returns what Draft 2020-12 finds wrong with each
// JSON file, one problem a line, by file; a valid file has none.
func validateWithPython(tb testing.TB, schemaFile string, jsonFiles []string) map[string]string {
	tb.Helper()
	const script = `
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
for f in sys.argv[2:]:
    for e in v.iter_errors(json.load(open(f))):
        print(f + "\t" + e.json_path + ": " + e.message)
        for c in e.context or []:
            print(f + "\t  " + c.json_path + ": " + c.message)
`
	out, err := exec.Command("python3", append([]string{"-c", script, schemaFile}, jsonFiles...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("python3 jsonschema: %v\n%s", err, out)
	}
	problems := map[string]string{}
	for line := range strings.Lines(string(out)) {
		file, problem, _ := strings.Cut(line, "\t")
		problems[file] += problem
	}
	return problems
}

// TestSchemaPatternsAgreeWithParsers: an editor refuses a duration or a
// size exactly when splicer would (negative durations aside, which the
// schema refuses and the validator too).
func TestSchemaPatternsAgreeWithParsers(t *testing.T) {
	dur := regexp.MustCompile(durationPattern)
	for _, s := range []string{"0", "5s", "500ms", "1m30s", "1.5h", "250us", "2µs", ".5s", "30", "5 s", "sec", "1d", "5S", ""} {
		_, err := ParseDuration(s)
		if got, want := dur.MatchString(s), err == nil; got != want {
			t.Errorf("duration %q: the schema's pattern matches: %v, ParseDuration accepts: %v", s, got, want)
		}
	}
	size := regexp.MustCompile(sizePattern)
	for _, s := range []string{"0", "65536", "64KiB", " 64 KiB ", "1GiB", "10B", "64KB", "1.5MiB", "KiB", "1TiB", "-1", ""} {
		_, err := ParseSize(s)
		if got, want := size.MatchString(s), err == nil; got != want {
			t.Errorf("size %q: the schema's pattern matches: %v, ParseSize accepts: %v", s, got, want)
		}
	}
}

// docs/configuration.md names every key the decoder accepts and no other, with the decoder's type, the code's default and the kinds that read it.

package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// referenceFile is the configuration reference, from this package;
// referencePath names it in messages.
var referenceFile = filepath.Join("..", "..", "docs", "configuration.md")

const referencePath = "docs/configuration.md"

// refRow is one key's row in the reference.
type refRow struct {
	line                                    int
	key, typ, def, unit, kinds, reload, why string
}

// referenceRows parses the reference's key tables: every table whose
// header starts with "| key | type | default | unit | kinds | reload |",
// one row per key, the key path in backticks in the first cell.
func referenceRows(tb testing.TB) map[string]refRow {
	tb.Helper()
	data, err := os.ReadFile(referenceFile)
	if err != nil {
		tb.Fatal(err)
	}
	rows := map[string]refRow{}
	inTable := false
	for i, line := range strings.Split(string(data), "\n") {
		cells := tableCells(line)
		switch {
		case cells == nil:
			inTable = false
		case slices.Equal(cells, []string{"key", "type", "default", "unit", "kinds", "reload", "meaning"}):
			inTable = true
		case !inTable || strings.Trim(cells[0], "-") == "":
		case len(cells) != 7:
			tb.Errorf("%s:%d: %d cells, want 7 (key, type, default, unit, kinds, reload, meaning)", referencePath, i+1, len(cells))
		default:
			key := strings.Trim(cells[0], "`")
			if key == cells[0] || strings.Contains(key, "`") {
				tb.Errorf("%s:%d: first cell %q is not one key path in backticks", referencePath, i+1, cells[0])
				continue
			}
			if first, dup := rows[key]; dup {
				tb.Errorf("%s:%d: key %s already has a row on line %d", referencePath, i+1, key, first.line)
			}
			rows[key] = refRow{line: i + 1, key: key, typ: cells[1], def: cells[2], unit: cells[3], kinds: cells[4], reload: cells[5], why: cells[6]}
		}
	}
	if len(rows) == 0 {
		tb.Fatalf("%s: no key table found", referencePath)
	}
	return rows
}

// tableCells splits a Markdown table row into its trimmed cells; nil
// for a line that is no table row.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// TestReferenceNamesEveryKey fails when the decoder accepts a key the
// reference has no row for, or the reference has a row for a key the
// decoder refuses, and says which.
func TestReferenceNamesEveryKey(t *testing.T) {
	rows := referenceRows(t)
	accepted := map[string]bool{}
	for _, k := range keys() {
		accepted[k.path] = true
		if _, ok := rows[k.path]; !ok {
			t.Errorf("%s has no row for key %s (%s), which the decoder accepts: document it in its section's table", referencePath, k.path, typeName(k.typ))
		}
	}
	for key, r := range rows {
		if !accepted[key] {
			t.Errorf("%s:%d: names key %s, which the decoder refuses (unknown key): remove the row or fix the path", referencePath, r.line, key)
		}
	}
}

// TestReferenceTypesAndDefaults: each row's type is the decoder's, and
// where the code has a fixed default the row's default cell starts with
// it, written as the file would (10s, 64KiB, [443]).
func TestReferenceTypesAndDefaults(t *testing.T) {
	rows := referenceRows(t)
	defaults := keyDefaults()
	for _, k := range keys() {
		r, ok := rows[k.path]
		if !ok {
			continue // TestReferenceNamesEveryKey reports it
		}
		if want := typeName(k.typ); r.typ != want {
			t.Errorf("%s:%d: %s has type %q, the decoder reads %q", referencePath, r.line, k.path, r.typ, want)
		}
		if r.unit == "" || r.reload == "" || r.why == "" {
			t.Errorf("%s:%d: %s has an empty unit, reload or meaning cell (write — for none)", referencePath, r.line, k.path)
		}
		if !slices.Contains([]string{"yes", "next start", "restart"}, r.reload) {
			t.Errorf("%s:%d: %s: reload %q, want yes, next start or restart", referencePath, r.line, k.path, r.reload)
		}
		d, ok := defaults[k.path]
		if !ok {
			continue
		}
		if got, want := firstCode(r.def), formatDefault(d); !sameDefault(k, got, want) {
			t.Errorf("%s:%d: %s has default %q, the code's is `%s`", referencePath, r.line, k.path, r.def, want)
		}
	}
}

// firstCode is the text of the first `code span` in s.
func firstCode(s string) string {
	_, rest, ok := strings.Cut(s, "`")
	if !ok {
		return ""
	}
	code, _, _ := strings.Cut(rest, "`")
	return code
}

// sameDefault compares a default as written in the reference with the
// code's: durations and sizes by value (75s is 1m15s).
func sameDefault(k key, got, want string) bool {
	switch k.typ {
	case durationType:
		g, err1 := ParseDuration(got)
		w, err2 := ParseDuration(want)
		return err1 == nil && err2 == nil && g == w
	case sizeType:
		g, err1 := ParseSize(got)
		w, err2 := ParseSize(want)
		return err1 == nil && err2 == nil && g == w
	}
	return got == want
}

// TestReferenceKinds: the kinds column of a listener key says which
// kinds read it. For the keys whose kinds the validator enforces
// (kindSections, builtinKeys) it names exactly those; a key inside one
// of them names some of them.
func TestReferenceKinds(t *testing.T) {
	rows := referenceRows(t)
	enforced := map[string][]string{"request_timeout": {"tcp"}}
	for k, kinds := range kindSections {
		enforced[k] = kinds
	}
	for k, kinds := range builtinKeys {
		enforced[k] = kinds
	}
	for _, k := range keys() {
		r, ok := rows[k.path]
		if !ok {
			continue
		}
		rest, isListener := strings.CutPrefix(k.path, "listeners[].")
		if !isListener {
			if r.kinds != "—" {
				t.Errorf("%s:%d: %s is no listener's key: kinds %q, want —", referencePath, r.line, k.path, r.kinds)
			}
			continue
		}
		got := splitKinds(r.kinds)
		top, _, nested := strings.Cut(rest, ".")
		top = strings.TrimSuffix(top, "[]")
		want, ok := enforced[top]
		if !ok {
			want = builtinKinds
		}
		switch {
		case len(got) == 0:
			t.Errorf("%s:%d: %s: no kinds in %q", referencePath, r.line, k.path, r.kinds)
		case !nested && !sameSet(got, want):
			t.Errorf("%s:%d: %s: kinds %q, the validator lets %v use it", referencePath, r.line, k.path, r.kinds, want)
		case !subset(got, want):
			t.Errorf("%s:%d: %s: kinds %q, but its section %s is only for %v", referencePath, r.line, k.path, r.kinds, top, want)
		}
	}
}

// splitKinds reads a kinds cell: "all" or kinds separated by commas.
func splitKinds(cell string) []string {
	if cell == "all" {
		return builtinKinds
	}
	var out []string
	for k := range strings.SplitSeq(cell, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool { return subset(a, b) && subset(b, a) }

// TestKeysAreTheDecoders checks keys against the decoder itself: a file
// that sets any one key (to an empty value, which every key takes) has
// no unknown key, and one that sets a key the list lacks (the last name
// of a key path with a letter more) has that unknown key.
func TestKeysAreTheDecoders(t *testing.T) {
	for _, k := range keys() {
		if errs := unknownKeys(t, k.path); len(errs) > 0 {
			t.Errorf("keys() lists %s, which the decoder refuses: %v", k.path, errs)
		}
		if errs := unknownKeys(t, k.path+"x"); len(errs) != 1 {
			t.Errorf("the decoder accepts %sx, which keys() does not list", k.path)
		}
	}
}

// unknownKeys parses a file setting the key at path to an empty value
// and returns the unknown-key errors.
func unknownKeys(tb testing.TB, path string) []Error {
	tb.Helper()
	_, err := Parse("keys.yaml", []byte(flowYAML(strings.Split(path, "."))))
	var errs, unknown Errors
	errors.As(err, &errs)
	for _, e := range errs {
		if strings.Contains(e.Msg, "unknown key") {
			unknown = append(unknown, e)
		}
	}
	return unknown
}

// flowYAML writes a key path as nested flow mappings, a list of one item
// for each "[]": listeners[].http.body_timeout is
// {listeners: [{http: {body_timeout: ~}}]}.
func flowYAML(path []string) string {
	name, list := strings.CutSuffix(path[0], "[]")
	if len(path) == 1 {
		return "{" + name + ": ~}"
	}
	inner := flowYAML(path[1:])
	if list {
		inner = "[" + inner + "]"
	}
	return "{" + name + ": " + inner + "}"
}

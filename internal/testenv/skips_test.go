// Tests of the CI skip check: a log's skips against an allow-list, and the repository's allow-list itself.

package testenv

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// skipLog is make test's verbose output with a helper process skipped
// (allowed) and two subtests skipped for a missing tool (not allowed).
const skipLog = `=== RUN   TestManyPairsHelper
    sockmap_test.go:413: helper process of TestManyPairs
--- SKIP: TestManyPairsHelper (0.00s)
=== RUN   TestLive
=== RUN   TestLive/ipv4
    live_test.go:372: this line says --- SKIP: TestNotASkip (0.00s) but is output
=== RUN   TestLive/ipv4_checksums_in_software_on_F
    live_test.go:316: ethtool not installed
=== RUN   TestLive/ipv6_checksums_in_software_on_F,_window_scales_differ
    live_test.go:316: ethtool not installed
--- PASS: TestLive (0.79s)
    --- PASS: TestLive/ipv4 (0.57s)
    --- SKIP: TestLive/ipv4_checksums_in_software_on_F (0.13s)
    --- SKIP: TestLive/ipv6_checksums_in_software_on_F,_window_scales_differ (0.09s)
PASS
ok  	github.com/splicer/splicer/engine/ip/internal/datapath	0.845s
`

func TestUnexpectedSkips(t *testing.T) {
	allowed, err := AllowedSkips(strings.NewReader("# helpers\n\nTestManyPairsHelper: helper process of TestManyPairs\n"))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := UnexpectedSkips(strings.NewReader(skipLog), allowed)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"TestLive/ipv4_checksums_in_software_on_F", "TestLive/ipv6_checksums_in_software_on_F,_window_scales_differ"}
	if !slices.Equal(bad, want) {
		t.Fatalf("unexpected skips = %q, want %q", bad, want)
	}
	allowed["TestLive/ipv4_checksums_in_software_on_F"] = "x"
	allowed["TestLive/ipv6_checksums_in_software_on_F,_window_scales_differ"] = "x"
	if bad, _ := UnexpectedSkips(strings.NewReader(skipLog), allowed); len(bad) != 0 {
		t.Fatalf("unexpected skips = %q with every skip allowed", bad)
	}
}

func TestAllowedSkipsNeedAReason(t *testing.T) {
	for _, line := range []string{"TestX", "TestX:", "TestX:   ", ": reason", "Test X: reason"} {
		if _, err := AllowedSkips(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%q accepted as an allow-list line", line)
		}
	}
}

// TestCIAllowedSkips checks the repository's allow-list: it parses, and
// every test it names exists, so that no entry outlives its test.
func TestCIAllowedSkips(t *testing.T) {
	root := filepath.Join("..", "..")
	f, err := os.Open(filepath.Join(root, ".ci", "allowed-skips"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	allowed, err := AllowedSkips(f)
	if err != nil {
		t.Fatal(err)
	}
	tests := testFuncs(t, root)
	for name := range allowed {
		if top, _, _ := strings.Cut(name, "/"); !tests[top] {
			t.Errorf(".ci/allowed-skips names %s, which no _test.go file declares", name)
		}
	}
}

// testFuncs returns the names of the test functions declared under root.
func testFuncs(tb testing.TB, root string) map[string]bool {
	tb.Helper()
	decl := regexp.MustCompile(`^func (Test\w*)\(`)
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := decl.FindStringSubmatch(sc.Text()); m != nil {
				names[m[1]] = true
			}
		}
		return sc.Err()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return names
}

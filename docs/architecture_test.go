// ARCHITECTURE.md's package arrows against go list: every package of the module, each with the packages of the module it imports, in both directions; and the leaves (admin, metrics) link no forwarder and no engine.

package docs

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module   = "github.com/splicer/splicer"
	archFile = "ARCHITECTURE.md"
	// depsOpen opens the fenced block that lists the arrows, one package a
	// line: "pkg -> dep dep ...", paths relative to the module.
	depsOpen  = "```deps\n"
	depsClose = "```\n"
)

var update = flag.Bool("update", false, "rewrite ARCHITECTURE.md's deps block from go list")

// TestArchitectureArrows: the deps block of ARCHITECTURE.md names every
// package of the module and, for each, exactly the packages of the module
// it imports (tests aside). A package, or an arrow, that one has and the
// other does not fails the test; -update rewrites the block.
func TestArchitectureArrows(t *testing.T) {
	doc, err := os.ReadFile(archFile)
	if err != nil {
		t.Fatal(err)
	}
	start, end := depsBlock(t, doc)
	listed := parseDeps(t, string(doc[start:end]))
	actual := goListImports(t)
	if *update {
		out := append(append(append([]byte{}, doc[:start]...), formatDeps(actual)...), doc[end:]...)
		if err := os.WriteFile(archFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, d := range diffDeps(listed, actual) {
		t.Error(d)
	}
	if t.Failed() {
		t.Logf("%s's deps block disagrees with go list: correct the design or the document (go test ./docs -update rewrites the block)", archFile)
	}
}

// TestLeavesLinkNoForwarderOrEngine: internal/admin and internal/metrics
// take small interfaces instead of importing what they describe; neither
// links the forwarder nor an engine, directly or through another package.
func TestLeavesLinkNoForwarderOrEngine(t *testing.T) {
	out := goList(t, "list", "-deps", "./internal/admin", "./internal/metrics")
	for _, p := range strings.Fields(out) {
		rel, ok := strings.CutPrefix(p, module+"/")
		if !ok {
			continue
		}
		for _, above := range []string{"forwarder", "engine"} {
			if rel == above || strings.HasPrefix(rel, above+"/") {
				t.Errorf("internal/admin or internal/metrics links %s", rel)
			}
		}
	}
}

// depsBlock returns where the deps block's lines start and end in doc.
func depsBlock(tb testing.TB, doc []byte) (start, end int) {
	tb.Helper()
	i := bytes.Index(doc, []byte(depsOpen))
	if i < 0 {
		tb.Fatalf("%s has no %q block", archFile, strings.TrimSpace(depsOpen))
	}
	start = i + len(depsOpen)
	n := bytes.Index(doc[start:], []byte(depsClose))
	if n < 0 {
		tb.Fatalf("%s: the deps block does not end", archFile)
	}
	return start, start + n
}

// parseDeps reads the block's "pkg -> dep dep ..." lines.
func parseDeps(tb testing.TB, block string) map[string][]string {
	tb.Helper()
	deps := map[string][]string{}
	for i, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		pkg, imports, ok := strings.Cut(line, "->")
		pkg = strings.TrimSpace(pkg)
		if !ok || pkg == "" {
			tb.Fatalf("%s: deps line %d %q is not \"pkg -> dep dep ...\"", archFile, i+1, line)
		}
		if _, dup := deps[pkg]; dup {
			tb.Fatalf("%s: %s has two deps lines", archFile, pkg)
		}
		deps[pkg] = strings.Fields(imports)
	}
	return deps
}

// goListImports is every package of the module with the packages of the
// module it imports, tests aside, as go list reports them.
func goListImports(tb testing.TB) map[string][]string {
	tb.Helper()
	out := goList(tb, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	deps := map[string][]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module+"/")
		deps[pkg] = []string{}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps[pkg] = append(deps[pkg], rel)
			}
		}
	}
	return deps
}

// goList runs the go command at the module's root and returns its output.
func goList(tb testing.TB, args ...string) string {
	tb.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// diffDeps says every package and every arrow that one of listed and
// actual has and the other does not.
func diffDeps(listed, actual map[string][]string) []string {
	var diffs []string
	for _, pkg := range sortedKeys(actual) {
		doc, ok := listed[pkg]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("package %s is missing (go list: %s -> %s)", pkg, pkg, strings.Join(actual[pkg], " ")))
			continue
		}
		for _, imp := range actual[pkg] {
			if !slices.Contains(doc, imp) {
				diffs = append(diffs, fmt.Sprintf("%s imports %s: the arrow is missing", pkg, imp))
			}
		}
		for _, imp := range doc {
			if !slices.Contains(actual[pkg], imp) {
				diffs = append(diffs, fmt.Sprintf("%s does not import %s: the arrow is wrong", pkg, imp))
			}
		}
	}
	for _, pkg := range sortedKeys(listed) {
		if _, ok := actual[pkg]; !ok {
			diffs = append(diffs, fmt.Sprintf("package %s is listed but does not exist", pkg))
		}
	}
	return diffs
}

// formatDeps is the deps block's lines for deps.
func formatDeps(deps map[string][]string) []byte {
	var b bytes.Buffer
	for _, pkg := range sortedKeys(deps) {
		imports := slices.Sorted(slices.Values(deps[pkg]))
		fmt.Fprintf(&b, "%s -> %s\n", pkg, strings.Join(imports, " "))
	}
	return bytes.ReplaceAll(b.Bytes(), []byte(" \n"), []byte("\n"))
}

func sortedKeys(m map[string][]string) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

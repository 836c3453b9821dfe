// Test helpers: both binaries built once into one directory, as installed, and run as a user would.

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/internal/testenv"
)

// bins holds both binaries, built once for every test of this package.
var bins testenv.Binaries

func TestMain(m *testing.M) { bins.Main(m) }

// splicer runs the daemon binary with args (demo and bench pass on to
// splicer-bench beside it) and returns its output and exit code.
func splicer(tb testing.TB, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	dir := bins.Build(tb, map[string]string{"../splicer": "splicer", ".": "splicer-bench"})
	return testenv.Run(tb, filepath.Join(dir, "splicer"), args...)
}

// benchOne runs 'splicer bench EXPERIMENT args... --json F' and returns
// the result written to F and the tables printed; a failed run or output
// that is not that experiment's result fails tb.
func benchOne(tb testing.TB, experiment string, args ...string) (r bench.Result, stdout string) {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), experiment+".json")
	args = append(append([]string{"bench", experiment}, args...), "--json", out)
	stdout, stderr, code := splicer(tb, args...)
	if code != 0 {
		tb.Fatalf("splicer %s: exit %d\nstderr:\n%s", strings.Join(args, " "), code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		tb.Fatalf("--json output of one experiment is not a result: %v", err)
	}
	if r.Experiment != experiment {
		tb.Fatalf("experiment %q, want %s", r.Experiment, experiment)
	}
	return r, stdout
}

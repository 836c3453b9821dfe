// Test helpers: both binaries built once into one directory, as installed, and run as a user would.

package main

import (
	"path/filepath"
	"testing"

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

// Test helpers: both binaries built once into one directory, as installed, and run as a user would.

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "splicer-bench-cli-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinaries builds splicer and splicer-bench side by side, once.
func buildBinaries(tb testing.TB) {
	tb.Helper()
	buildOnce.Do(func() {
		for pkg, name := range map[string]string{"../splicer": "splicer", ".": "splicer-bench"} {
			out, err := exec.Command("go", "build", "-ldflags", testenv.VersionLDFlags(), "-o", filepath.Join(binDir, name), pkg).CombinedOutput()
			if err != nil {
				buildErr = errors.New(string(out))
				return
			}
		}
	})
	if buildErr != nil {
		tb.Fatalf("go build: %v", buildErr)
	}
}

// splicer runs the daemon binary with args (demo and bench pass on to
// splicer-bench beside it) and returns its output and exit code.
func splicer(tb testing.TB, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	buildBinaries(tb)
	cmd := exec.Command(filepath.Join(binDir, "splicer"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		tb.Fatalf("splicer %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

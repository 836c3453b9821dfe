// Binaries built once per test process, as released, and run as a user would.

package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binaries builds a test package's binaries once, side by side in one
// temporary directory, as they are installed. Its zero value is ready;
// a package's TestMain calls Main.
type Binaries struct {
	once sync.Once
	dir  string
	err  error
}

// Build builds each package (a directory, relative to the test's) to its
// binary name the first time it is called, and returns the directory.
// The binaries are static (CGO_ENABLED=0), as releases are: only such a
// daemon can change every thread's capabilities.
func (b *Binaries) Build(tb testing.TB, pkgs map[string]string) string {
	tb.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "splicer-bin-"); b.err != nil {
			return
		}
		for pkg, name := range pkgs {
			cmd := exec.Command("go", "build", "-ldflags", VersionLDFlags(), "-o", filepath.Join(b.dir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.err = errors.New(string(out))
				return
			}
		}
	})
	if b.err != nil {
		tb.Fatalf("go build: %v", b.err)
	}
	return b.dir
}

// Remove deletes what Build built.
func (b *Binaries) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// Main is the body of a TestMain for a package whose tests share b: it
// runs the tests, removes the binaries and exits with the tests' code.
func (b *Binaries) Main(m *testing.M) {
	code := m.Run()
	b.Remove()
	os.Exit(code)
}

// Run runs the binary at path with args and returns its output and exit
// code; a binary that cannot start fails tb.
func Run(tb testing.TB, path string, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	return run(tb, exec.Command(path, args...))
}

// RunWithin is Run that kills the binary after timeout (exit code -1): a
// command that should stop at once and serves instead ends the test
// rather than hanging it.
func RunWithin(tb testing.TB, timeout time.Duration, path string, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return run(tb, exec.CommandContext(ctx, path, args...))
}

// run runs cmd and returns its output and exit code; a command that
// cannot start fails tb.
func run(tb testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	tb.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		tb.Fatalf("%s %s: %v", filepath.Base(cmd.Path), strings.Join(cmd.Args[1:], " "), err)
	}
	return out.String(), errOut.String(), code
}

// Package testenv decides whether privileged tests run: they skip with a reason on a developer machine and fail in CI.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where a skipped
// privileged test is a failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// RequireRoot skips tb unless the process is root; under CI it fails instead,
// so that CI cannot pass with the privileged tests silently skipped.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	SkipOrFail(tb, "needs root (network namespaces, BPF, TCP_REPAIR)")
}

// SkipOrFail skips tb with reason, or fails it under CI.
func SkipOrFail(tb testing.TB, reason string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("privileged test cannot run in CI: %s", reason)
	}
	tb.Skip("privileged test skipped: " + reason)
}

// The version stamp test builds carry, as the Makefile's build does.

package testenv

import (
	"os/exec"
	"strings"
)

// VersionLDFlags is the -ldflags value that stamps a binary with `git
// describe` of the working tree, as `make build` does, or "" outside git.
func VersionLDFlags() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	flags := "-X github.com/splicer/splicer/internal/buildinfo.Version=" + strings.TrimSpace(string(out))
	if rev, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		flags += " -X github.com/splicer/splicer/internal/buildinfo.Revision=" + strings.TrimSpace(string(rev))
	}
	return flags
}

// splicer version names a real version, and the daemon binary links none of the bench, lab or plotting code.

package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version"} {
		out, _, code := splicer(t, arg)
		if code != 0 || !regexp.MustCompile(`^splicer \S+ \(revision \S+, go\S+\)\n$`).MatchString(out) {
			t.Errorf("splicer %s: exit %d, %q", arg, code, out)
		}
		if strings.Contains(out, " dev ") || strings.Contains(out, "splicer unknown") {
			t.Errorf("splicer %s built in a git checkout says %q: want the commit or a tag", arg, out)
		}
	}
}

// TestDaemonIsLean: the lab, the load generators, the benchmark and the
// plotting library stay in splicer-bench, and nothing pulls in testing.
func TestDaemonIsLean(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "gonum.org/"),
			dep == "testing",
			dep == "github.com/splicer/splicer/bench",
			dep == "github.com/splicer/splicer/lab",
			dep == "github.com/splicer/splicer/loadgen",
			dep == "github.com/splicer/splicer/origin":
			t.Errorf("the daemon links %s", dep)
		}
	}
}

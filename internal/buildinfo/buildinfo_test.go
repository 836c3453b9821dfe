// A stamped version wins; without one the version is never empty.

package buildinfo

import (
	"runtime"
	"testing"
)

func TestGet(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v1.2.3-4-gabcdef"
	if got := Get(); got.Version != "v1.2.3-4-gabcdef" || got.GoVersion != runtime.Version() {
		t.Errorf("stamped: %+v", got)
	}
	Version = ""
	if got := Get(); got.Version == "" || got.Version == "dev" {
		t.Errorf("unstamped version %q: want the module version, the revision or unknown", got.Version)
	}
}

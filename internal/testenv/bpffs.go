// MountBPFFS: a BPF file system of the test's own, for tests that pin.

package testenv

import (
	"testing"

	"golang.org/x/sys/unix"
)

// MountBPFFS mounts a BPF file system of the test's own and returns its
// root; cleanup unmounts it, which drops whatever is still pinned there.
func MountBPFFS(tb testing.TB) string {
	tb.Helper()
	RequireRoot(tb)
	dir := tb.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		tb.Fatalf("mount bpffs: %v", err)
	}
	tb.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

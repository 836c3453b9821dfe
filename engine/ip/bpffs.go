// The BPF file system the pin directory lives on: checking it, mounting it at /sys/fs/bpf when that outlives the process, and locking a directory in it.

package ip

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bpffsRoot is where systemd and most distributions mount the BPF file system.
const bpffsRoot = "/sys/fs/bpf"

// ensureBPFFS makes sure dir can be created on a BPF file system: its
// deepest existing ancestor must be on one. Under /sys/fs/bpf with nothing
// mounted there, it mounts one, unless the mount would vanish with this
// process (a mount namespace of its own, as under `ip netns exec`).
func ensureBPFFS(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	anc := existingAncestor(dir)
	if onBPFFS(anc) {
		return nil
	}
	if !within(dir, bpffsRoot) {
		return fmt.Errorf("%s is not on a BPF file system: mount one (mount -t bpf bpf DIR) or set engines.ip.pin_dir to a directory under one", anc)
	}
	if onBPFFS(bpffsRoot) || anc != bpffsRoot {
		return fmt.Errorf("%s is not on a BPF file system", anc)
	}
	shared, err := mountNSShared()
	if err != nil {
		return fmt.Errorf("%s is not a BPF file system, and whether one mounted there would outlive this process is unknown (%v): mount it (mount -t bpf bpf %s)", bpffsRoot, err, bpffsRoot)
	}
	if !shared {
		return fmt.Errorf("%s is not a BPF file system, and one mounted there by this process would vanish with it: no other process shares its mount namespace (ip netns exec, a private mount namespace); mount bpffs where the next process sees it (mount -t bpf bpf %s on the host) or set engines.ip.pin_dir to a directory on one", bpffsRoot, bpffsRoot)
	}
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount a BPF file system at %s: %w", bpffsRoot, err)
	}
	return nil
}

// existingAncestor is dir or its deepest ancestor that exists.
func existingAncestor(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

func onBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// within reports whether path is root or below it.
func within(path, root string) bool {
	rel, err := filepath.Rel(root, filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// mountNSShared reports whether another process is in this process's mount
// namespace: a file system mounted here then stays mounted when this
// process ends.
func mountNSShared() (bool, error) {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &self); err != nil {
		return false, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, err
	}
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/mnt", &st) == nil && st.Ino == self.Ino && st.Dev == self.Dev {
			return true, nil
		}
	}
	return false, nil
}

// errLocked says another live process holds a directory's lock.
var errLocked = errors.New("locked by a live process")

// lockDir opens dir and takes an exclusive flock on it without waiting. The
// lock goes with the returned file, or with the process.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}

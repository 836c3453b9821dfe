// The namespace directory made a mount point of its own before the lab mounts anything there, as `ip netns add` makes it.

package lab

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsDirLock serializes the directory's first setup between processes
// (the test packages run in parallel): two binds would stack.
const netnsDirLock = "/run/splicer-netns.lock"

var netnsDirOnce struct {
	sync.Once
	err error
}

// prepareNetnsDir makes /run/netns a shared mount point bound on itself,
// what `ip netns add` does the first time it runs on a host, before the
// lab mounts a namespace there. Done afterwards by `ip netns add` (a
// test adding a namespace of its own, an operator), the bind covers the
// mounts already in the directory with copies; the originals, hidden
// beneath, can no longer be unmounted, and deleting their files fails
// with "device or resource busy" for as long as the host runs.
func prepareNetnsDir() error {
	netnsDirOnce.Do(func() { netnsDirOnce.err = bindNetnsDir() })
	return netnsDirOnce.err
}

func bindNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(netnsDirLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", netnsDirLock, err)
	}
	// Already a mount point (an earlier lab, or ip netns): shared is all
	// it needs. EINVAL: not a mount point yet.
	err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return wrapMount(err)
	}
	if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return wrapMount(err)
	}
	return wrapMount(unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""))
}

func wrapMount(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("make %s a shared mount point (as ip netns does): %w", netnsDir, err)
}

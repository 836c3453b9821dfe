// Removing lab namespaces that crashed runs left behind.

package lab

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Sweep deletes the namespaces of labs with name prefix prefix whose creating
// process has exited, killing any process still inside them. Labs of live
// processes, this one included, are left alone, so Sweep is safe to run
// while other labs are in use. (A stale lab whose pid has been reused by an
// unrelated process survives until that process exits.)
func Sweep(prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", netnsDir, err)
	}
	var errs []error
	for _, e := range entries {
		pid, ok := creatorPID(e.Name(), prefix)
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		errs = append(errs, removeNS(e.Name()))
	}
	return errors.Join(errs...)
}

// creatorPID parses the pid out of a name New made: PREFIX-PID-SUFFIX-ROLE.
func creatorPID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[0])
	return pid, err == nil && pid > 0
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

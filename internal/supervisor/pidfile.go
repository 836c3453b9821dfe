// The pid file of 'splicer run --pid-file': written by whichever process serves (the single process, the master, or the one a root process hands over to), and removed at the end by the process it still names; with it the reload status file (reloadstatus.go).

package supervisor

import (
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/sdnotify"
)

// writePidFile writes pid to path ("" is no pid file), and before it
// the reload status file naming pid: a pid file never names a process
// that the status file does not.
func writePidFile(path string, pid int) error {
	if path == "" {
		return nil
	}
	if err := writeStatus(path, reloadStatus{Pid: pid}); err != nil {
		return err
	}
	return writePid(path, pid)
}

func writePid(path string, pid int) error {
	return os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// removePidFile removes path unless a new process (an upgrade's) has
// written its own.
func removePidFile(path string) {
	if path == "" {
		return
	}
	removeStatus(path)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}

// announceSuccessor names pid, the process this root one handed its
// sockets to as user id, in the pid file and to systemd as the main
// process, ready. The status file beside it becomes id's to write: the
// directory may be root's only.
func announceSuccessor(log *slog.Logger, pidFile string, pid int, id *handoff.Identity) {
	err := handStatus(pidFile, pid, int(id.UID), int(id.GID))
	if err == nil && pidFile != "" {
		err = writePid(pidFile, pid)
	}
	if err != nil {
		log.Warn("pid file", "path", pidFile, "err", err)
	}
	notify(log, "MAINPID="+strconv.Itoa(pid)+"\n"+sdnotify.Ready)
}

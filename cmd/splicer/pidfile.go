// The pid file of 'splicer run --pid-file': written by whichever process serves (the single process, the master, or the one a root process hands over to), and removed at the end by the process it still names.

package main

import (
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/splicer/splicer/internal/sdnotify"
)

// writePidFile writes pid to path; "" is no pid file.
func writePidFile(path string, pid int) error {
	if path == "" {
		return nil
	}
	return os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// removePidFile removes path unless a new process (an upgrade's) has
// written its own.
func removePidFile(path string) {
	if path == "" {
		return
	}
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}

// announceSuccessor names pid, the process this root one handed its
// sockets to, in the pid file and to systemd as the main process, ready.
func announceSuccessor(log *slog.Logger, pidFile string, pid int) {
	if err := writePidFile(pidFile, pid); err != nil {
		log.Warn("pid file", "path", pidFile, "err", err)
	}
	notify(log, "MAINPID="+strconv.Itoa(pid)+"\n"+sdnotify.Ready)
}

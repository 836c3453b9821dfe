// The reload status file beside the pid file: the daemon writes there the outcome of its latest reload, so that 'splicer reload --pid-file', which can only send SIGHUP, waits for the answer to its signal and exits non-zero on a refusal.

package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A signal carries no question to answer, so the CLI recognises the
// answer to its own by time: it reads CLOCK_MONOTONIC (one clock for
// every process of the host) before it sends SIGHUP, and the daemon
// records when each reload began, after taking its reload lock and
// before reading the file. An outcome whose reload began after the
// signal was sent read the file as it was then or later: it answers the
// signal, even when two signals were merged into one reload or another
// reload (the admin endpoint's) was under way when the signal came. A
// generation counter could not tell a reload that began before the
// signal and ended after it from the one the signal asked for.
//
// The file is written whole, into a temporary file renamed over it;
// where the directory is not the daemon's to write (a pid file in a
// root-owned directory, written by the root process that handed over to
// `user`), in place into the file that root process created for it
// (announceSuccessor). A reader that meets a file half written sees no
// valid outcome and reads again.

// reloadStatus is the content of the status file.
type reloadStatus struct {
	// Pid is the process that wrote it: the one the pid file names.
	Pid int `json:"pid"`
	// Began is CLOCK_MONOTONIC (ns) when the latest reload began; 0
	// when the process has not reloaded since it started.
	Began int64 `json:"began,omitempty"`
	// OK tells a reload applied; Answer is what the admin endpoint
	// would answer: the notes on what was not applied, or every error.
	OK     bool   `json:"ok,omitempty"`
	Answer string `json:"answer,omitempty"`
}

// StatusPath is the status file of pid file pidFile: the same name with
// ".reload" for ".pid" (or after it, without one).
func StatusPath(pidFile string) string {
	return strings.TrimSuffix(pidFile, ".pid") + ".reload"
}

// monotonicNow is CLOCK_MONOTONIC in nanoseconds.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// writeStatus writes st to the status file of pidFile ("" is none).
func writeStatus(pidFile string, st reloadStatus) error {
	if pidFile == "" {
		return nil
	}
	path := StatusPath(pidFile)
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		// Not our directory: write into the file prepared for us.
		return os.WriteFile(path, data, 0o644)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// readStatus reads the status file of pidFile; a file half written is
// an error like a missing one.
func readStatus(pidFile string) (reloadStatus, error) {
	var st reloadStatus
	data, err := os.ReadFile(StatusPath(pidFile))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(data, &st)
	return st, err
}

// reloadOutcome records the outcome of a reload that began at began:
// notes, or err.
func reloadOutcome(began int64, notes []string, err error) reloadStatus {
	st := reloadStatus{Pid: os.Getpid(), Began: began, OK: err == nil, Answer: strings.Join(notes, "\n")}
	if err != nil {
		st.Answer = err.Error()
	}
	return st
}

// removeStatus removes the status file of pidFile unless another
// process (an upgrade's) has written its own.
func removeStatus(pidFile string) {
	if pidFile == "" {
		return
	}
	if st, err := readStatus(pidFile); err == nil && st.Pid == os.Getpid() {
		os.Remove(StatusPath(pidFile))
	}
}

// handStatus starts the status file of pidFile for pid, a process
// running as uid and gid that may not write in the file's directory: it
// is theirs to write in place.
func handStatus(pidFile string, pid, uid, gid int) error {
	if pidFile == "" {
		return nil
	}
	if err := writeStatus(pidFile, reloadStatus{Pid: pid}); err != nil {
		return err
	}
	return os.Chown(StatusPath(pidFile), uid, gid)
}

// reloadAnswerTimeout bounds the wait for a daemon's answer to SIGHUP:
// a reload waits for an upgrade under way, and has each worker reload
// in turn.
const reloadAnswerTimeout = UpgradeTimeout + 10*time.Second

// errNoAnswer: the signalled daemon does not report reload outcomes.
var errNoAnswer = errors.New("it reports no reload outcome")

// awaitReload waits for the outcome of the first reload of process pid
// that began at or after sent, as recorded beside pidFile, and returns
// its answer, or the refusal as the error.
func awaitReload(pidFile string, pid int, sent int64, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := readStatus(pidFile)
		switch {
		case err == nil && st.Pid == pid && st.Began >= sent && st.OK:
			return strings.TrimSpace("ok\n" + st.Answer), nil
		case err == nil && st.Pid == pid && st.Began >= sent:
			return "", errors.New(st.Answer)
		case syscall.Kill(pid, 0) == syscall.ESRCH:
			return "", fmt.Errorf("process %d ended before it answered", pid)
		case time.Now().After(deadline):
			return "", fmt.Errorf("process %d gave no answer in %s within %v: see its log", pid, StatusPath(pidFile), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReloadByPid sends SIGHUP to pid and returns its answer, read from the
// status file beside pidFile; a refusal is the error. A daemon whose
// status file does not name it cannot answer: the signal is sent, and
// the unknown outcome is an error too.
func ReloadByPid(pidFile string, pid int) (string, error) {
	st, err := readStatus(pidFile)
	for i := 0; i < 10 && err != nil && !errors.Is(err, fs.ErrNotExist); i++ {
		time.Sleep(20 * time.Millisecond) // being written in place
		st, err = readStatus(pidFile)
	}
	answers := err == nil && st.Pid == pid
	sent := monotonicNow()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return "", fmt.Errorf("signal %d: %w", pid, err)
	}
	if !answers {
		return "", fmt.Errorf("sent SIGHUP to process %d, but %w in %s (a splicer older than this one, or one that cannot write there): see its log for the outcome", pid, errNoAnswer, StatusPath(pidFile))
	}
	return awaitReload(pidFile, pid, sent, reloadAnswerTimeout)
}

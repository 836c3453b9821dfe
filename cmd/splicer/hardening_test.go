// Tests of the binary's refusals and warnings about an unsafe setup: an admin endpoint beyond loopback without a token, a configuration others may write, a pid file that names another program.

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

// TestAdminBeyondLoopbackNeedsToken: check and run refuse an admin
// endpoint on every address without admin_token, saying so, and run
// serves nothing; with a token check accepts it.
func TestAdminBeyondLoopbackNeedsToken(t *testing.T) {
	t.Parallel()
	listen := freeLoopback(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "open.yaml")
	body := fmt.Sprintf("listeners:\n  - {name: a, listen: '%s', upstream: ['127.0.0.1:1']}\n", listen)
	writeFile(t, path, []byte("admin: 0.0.0.0:19977\n"+body))
	for _, cmd := range [][]string{{"check", "--engines=false", path}, {"run", "--config", path}} {
		stderr, code := splicerWithin(t, 15*time.Second, cmd...)
		if code != 1 || !strings.Contains(stderr, `admin: "0.0.0.0:19977" is reachable beyond this host and no admin_token is set`) {
			t.Errorf("splicer %s: exit %d, stderr %q; want 1 and why", cmd[0], code, stderr)
		}
	}
	if c, err := net.DialTimeout("tcp", listen, time.Second); err == nil {
		c.Close()
		t.Errorf("run served %s with an admin endpoint open to all", listen)
	}
	tokened := filepath.Join(dir, "token.yaml")
	writeFile(t, tokened, []byte("admin: 0.0.0.0:19977\nadmin_token: s3cret\n"+body))
	if _, stderr, code := splicer(t, "check", "--engines=false", tokened); code != 0 {
		t.Errorf("check with admin_token: exit %d, stderr %q; want 0", code, stderr)
	}
}

// TestWarnsWritableConfig: check and run warn when any user may write
// the configuration file or its directory, and not otherwise.
func TestWarnsWritableConfig(t *testing.T) {
	t.Parallel()
	// A listener on a taken address: run stops right after loading.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	const warning = "configuration writable by any user"
	dir := filepath.Join(t.TempDir(), "etc")
	path := filepath.Join(dir, "splicer.yaml")
	writeFile(t, path, fmt.Appendf(nil, "listeners:\n  - {name: a, listen: '%s', upstream: ['127.0.0.1:1']}\n", taken.Addr()))
	for _, tc := range []struct {
		name          string
		file, dirMode os.FileMode
		warns         bool
	}{
		{"private", 0o644, 0o755, false},
		{"world-writable file", 0o666, 0o755, true},
		{"world-writable directory", 0o644, 0o777, true},
		{"sticky directory", 0o644, 0o777 | os.ModeSticky, false},
	} {
		os.Chmod(path, tc.file)
		os.Chmod(dir, tc.dirMode)
		for _, cmd := range [][]string{{"check", "--engines=false", path}, {"run", "--config", path}} {
			stderr, _ := splicerWithin(t, 15*time.Second, cmd...)
			if got := strings.Contains(stderr, warning); got != tc.warns {
				t.Errorf("%s: splicer %s warned %v, want %v; stderr:\n%s", tc.name, cmd[0], got, tc.warns, stderr)
			}
		}
	}
}

// TestReloadRefusesPidFileOfAnotherProgram: a pid file naming a process
// that is not splicer (a stale file whose pid was reused) is refused,
// and that process gets no signal.
func TestReloadRefusesPidFileOfAnotherProgram(t *testing.T) {
	t.Parallel()
	sleep := exec.Command("sleep", "infinity")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	pidFile := filepath.Join(t.TempDir(), "splicer.pid")
	writeFile(t, pidFile, fmt.Appendf(nil, "%d\n", sleep.Process.Pid))
	for _, cmd := range []string{"reload", "upgrade"} {
		stderr, code := splicerWithin(t, 15*time.Second, cmd, "--pid-file", pidFile)
		if code != 1 || !strings.Contains(stderr, "runs sleep, not splicer") {
			t.Errorf("splicer %s --pid-file naming sleep: exit %d, stderr %q; want 1 and why", cmd, code, stderr)
		}
	}
	if err := sleep.Process.Signal(syscall.Signal(0)); err != nil || processState(t, sleep.Process.Pid) == "Z" {
		t.Errorf("the sleep process named in the pid file died: %v", err)
	}
}

// splicerWithin runs the binary with args as splicer does, killing it
// after timeout (exit code -1): a command that should stop at once and
// serves instead ends the test rather than hanging it.
func splicerWithin(tb testing.TB, timeout time.Duration, args ...string) (stderr string, code int) {
	tb.Helper()
	_, stderr, code = testenv.RunWithin(tb, timeout, splicerBinary(tb), args...)
	return stderr, code
}

// processState is the state letter of /proc/PID/stat (Z: a zombie, dead
// and not yet waited for).
func processState(tb testing.TB, pid int) string {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}

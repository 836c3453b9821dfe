// 'splicer reload' in every form reports the daemon's outcome: a refused file exits 1 with its errors (by the pid file as by the admin endpoint, from a single process or a master), an applied one exits 0, and a daemon that cannot answer is not taken for a success.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/supervisor"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

// TestReloadExitCode: a file that adds a listener but has an
// error is refused, and 'splicer reload' says so with the error's
// FILE:LINE:COL and exits 1, by --pid-file and by --admin; the listener
// it would add serves nobody and its upstream sees no connection. The
// file fixed, 'splicer reload --pid-file' exits 0 and the listener
// serves. The same from a master, and from a daemon that root started
// as nobody, whose pid file's directory nobody cannot write. (Short
// names: a master's socket paths start with the test's directory.)
func TestReloadExitCode(t *testing.T) {
	const asNobody = "user: nobody\nengines: {ip: {enabled: false}, sockmap: {enabled: false}}\n"
	t.Run("one", func(t *testing.T) { testReloadRefusal(t, "") })
	t.Run("workers", func(t *testing.T) { testReloadRefusal(t, "workers: 2\n") })
	t.Run("user", func(t *testing.T) { testReloadRefusal(t, asNobody) })
	t.Run("userworkers", func(t *testing.T) { testReloadRefusal(t, "workers: 2\n"+asNobody) })
}

func testReloadRefusal(t *testing.T, head string) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	counted, accepted := countingEchoes(t)
	keep, added := freeLoopback(t), freeLoopback(t)
	var d *daemonProc
	exited := make(<-chan error) // the root process of a handover exits
	if strings.Contains(head, "user:") {
		testenv.RequireRoot(t)
		os.Chmod(filepath.Dir(splicerBinary(t)), 0o755) // nobody runs it
		d = s.startRunReadable(t, head+daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy")))
	} else {
		d = s.startRun(t, head+daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy")))
		exited = d.exited
	}
	// A master answers on its admin endpoint before its workers (which
	// read the file) serve; it writes the pid file once they do.
	waitUntil(t, "the pid file", exited, func() bool { return d.pid() != 0 && s.ping(keep) == nil })
	if strings.Contains(head, "workers:") {
		t.Cleanup(func() { stopMaster(t, d.pid()) })
	}

	broken := head + daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, counted[0], "copy")) + "    conect_timeout: 1s\n"
	writeFile(t, d.configPath(), []byte(broken))
	errLine := regexp.MustCompile(regexp.QuoteMeta(d.configPath()) + `:\d+:\d+: listeners\[1\]\.conect_timeout: unknown key "conect_timeout"`)
	for _, by := range [][]string{{"--pid-file", d.pidFile}, {"--admin", s.adminAddr}} {
		stderr, code := splicerWithin(t, 2*time.Minute, append([]string{"reload"}, by...)...)
		if code != 1 || !strings.Contains(stderr, "reload refused, the running configuration stays") || !errLine.MatchString(stderr) {
			t.Errorf("splicer reload %s of a broken file: exit %d, stderr %q; want 1 and the error at its line", by[0], code, stderr)
		}
	}
	if err := s.ping(added); err == nil {
		t.Errorf("the listener of the refused file serves")
	}
	if n := accepted[0].Load(); n != 0 {
		t.Errorf("the upstream of the refused file's listener got %d connection(s), want 0", n)
	}
	if err := s.ping(keep); err != nil {
		t.Errorf("the running listener after the refusals: %v", err)
	}

	writeFile(t, d.configPath(), []byte(strings.TrimSuffix(broken, "    conect_timeout: 1s\n")))
	stdout, stderr, code := splicer(t, "reload", "--pid-file", d.pidFile)
	if code != 0 || !strings.HasPrefix(stdout, "ok") {
		t.Fatalf("splicer reload --pid-file of a fixed file: exit %d, stdout %q, stderr %q; want 0 and ok", code, stdout, stderr)
	}
	// The answer came after the reload: the listener serves at once.
	if err := s.ping(added); err != nil {
		t.Errorf("the added listener right after reload exited 0: %v", err)
	}
	if n := accepted[0].Load(); n != 1 {
		t.Errorf("the added listener's upstream got %d connection(s), want 1", n)
	}
}

// TestReloadWithoutAnswerFails: a daemon that writes no outcome (a
// splicer older than the command, or one that cannot write beside its
// pid file) still gets its SIGHUP, and 'splicer reload --pid-file' exits
// 1 rather than claim a success it cannot know.
func TestReloadWithoutAnswerFails(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	keep, added := freeLoopback(t), freeLoopback(t)
	d := s.startRun(t, daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy")))
	// The daemon answers on its admin endpoint a moment before it writes
	// its pid and status files.
	waitUntil(t, "the pid file", d.exited, func() bool { _, err := os.Stat(d.pidFile); return err == nil })
	if err := os.Remove(supervisor.StatusPath(d.pidFile)); err != nil {
		t.Fatalf("the daemon wrote no status file beside its pid file: %v", err)
	}
	writeFile(t, d.configPath(), []byte(daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, up, "copy"))))
	stderr, code := splicerWithin(t, time.Minute, "reload", "--pid-file", d.pidFile)
	if code != 1 || !strings.Contains(stderr, fmt.Sprintf("sent SIGHUP to process %d, but it reports no reload outcome", d.pid())) {
		t.Errorf("splicer reload --pid-file without a status file: exit %d, stderr %q; want 1 and why", code, stderr)
	}
	waitUntil(t, "the signalled reload to add the listener", d.exited, func() bool { return s.ping(added) == nil })
}

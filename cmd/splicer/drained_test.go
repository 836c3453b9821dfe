// A server an operator drained stays drained across `splicer upgrade`.

package main

import (
	"regexp"
	"testing"
	"time"
)

// TestRunUpgradeKeepsDrainedServers: a tcp listener in front of two echo
// servers; the second is drained with `splicer upstreams --drain`, then
// `splicer upgrade` replaces the process. The new process's table still
// says drained, and 4 connections through it all reach the first server.
func TestRunUpgradeKeepsDrainedServers(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	ups, accepted := countingEchoes(t)
	plug := freeLoopback(t)
	d := s.startRun(t, daemonYAML(s, "5s", listenerYAML("plug", plug, ups[0]+", "+ups[1], "copy")))
	oldPid := d.pid()
	if out, stderr, code := splicer(t, "upstreams", "--admin", s.adminAddr, "--drain", ups[1]); code != 0 {
		t.Fatalf("splicer upstreams --drain: exit %d: %s%s", code, out, stderr)
	}
	if out, stderr, code := splicer(t, "upgrade", "--admin", s.adminAddr); code != 0 {
		t.Fatalf("splicer upgrade: exit %d: %s%s", code, out, stderr)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the old process still runs 30s after the upgrade")
	}
	if pid := d.pid(); pid == 0 || pid == oldPid {
		t.Fatalf("pid file names %d after the upgrade (old %d)", pid, oldPid)
	}
	out, stderr, code := splicer(t, "upstreams", "--admin", s.adminAddr)
	if drained := regexp.MustCompile(`(?m)^plug +upstream +` + regexp.QuoteMeta(ups[1]) + ` +yes +no +0 +yes `); code != 0 || !drained.MatchString(out) {
		t.Fatalf("the new process's upstreams (exit %d), want %s drained:\n%s%s", code, ups[1], out, stderr)
	}
	before := [2]int64{accepted[0].Load(), accepted[1].Load()}
	for range 4 {
		if err := s.ping(plug); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := accepted[0].Load()-before[0], accepted[1].Load()-before[1]; a != 4 || b != 0 {
		t.Errorf("after the upgrade, 4 connections reached the servers %d and %d times, want 4 and 0", a, b)
	}
}

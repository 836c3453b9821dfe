// Tests for the threads key: the daemon runs Go code on as many threads as it says, from start and after each reload.

package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/splicer/splicer/origin"
)

// TestRunThreads: threads 1 holds the daemon to one thread at start, a
// reload to threads 2 gives it two, and a reload without the key gives
// it back one per CPU, each shown in /metrics (go_sched_gomaxprocs_threads)
// and in the log.
func TestRunThreads(t *testing.T) {
	t.Parallel()
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set in the environment: the daemon's default would be it, not one per CPU")
	}
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	listen := freeLoopback(t)
	conf := func(threads string) string {
		return threads + daemonYAML(s, "5s", listenerYAML("plug", listen, up, "copy"))
	}
	d := s.startRun(t, conf("threads: 1\n"))
	if got := s.gomaxprocs(t); got != 1 {
		t.Errorf("threads 1: the daemon runs Go code on %d threads", got)
	}
	if !strings.Contains(d.logs(), "msg=threads threads=1 from=threads") {
		t.Errorf("the log does not say threads=1 from the configuration")
	}
	reload := func(threads string, want int) {
		t.Helper()
		// The reload's end, not only the count: a default equal to the
		// count before (one per CPU on two CPUs, after "threads: 2")
		// would otherwise be seen before the reload ran.
		reloaded := strings.Count(d.logs(), "msg=reloaded")
		writeFile(t, d.configPath(), []byte(conf(threads)))
		d.cmd.Process.Signal(syscall.SIGHUP)
		waitUntil(t, fmt.Sprintf("the reload of %q", threads), d.exited, func() bool { return strings.Count(d.logs(), "msg=reloaded") > reloaded })
		waitUntil(t, fmt.Sprintf("%d threads after reloading %q", want, threads), d.exited, func() bool { return s.gomaxprocs(t) == want })
		if err := s.ping(listen); err != nil {
			t.Errorf("the listener after reloading %q: %v", threads, err)
		}
	}
	reload("threads: 2\n", 2)
	reload("", runtime.GOMAXPROCS(0))
	if !strings.Contains(d.logs(), "from=\"one per CPU\"") {
		t.Errorf("the log does not say the default came back")
	}
}

// gomaxprocs reads go_sched_gomaxprocs_threads from the daemon's /metrics.
func (s *site) gomaxprocs(tb testing.TB) int {
	tb.Helper()
	resp, err := s.admin.Get("http://" + s.adminAddr + "/metrics")
	if err != nil {
		tb.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				tb.Fatalf("/metrics: go_sched_gomaxprocs_threads %q: %v", v, err)
			}
			return n
		}
	}
	tb.Fatalf("/metrics lacks go_sched_gomaxprocs_threads")
	return 0
}

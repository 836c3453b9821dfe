// Least privilege in the lab: `splicer run` started as root with `user: nobody` serves as uid 65534 without CAP_SYS_ADMIN, with no_new_privs, and still splices with engine ip, with one process or a master and workers.

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

func TestRunAsUserStillSplicesWithIP(t *testing.T) { testRunAsUser(t, 0) }

// TestRunAsUserWithWorkers: the same with two workers: the root process
// binds every socket and steps aside, and the master and both workers
// run as the user with only the engines' capabilities.
func TestRunAsUserWithWorkers(t *testing.T) { testRunAsUser(t, 2) }

func testRunAsUser(t *testing.T, workers int) {
	testenv.RequireRoot(t)
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	up := s.echoUpstream(t)
	addr := "10.99.1.1:17400"
	config := func(listenerKeys string) string {
		cfg := "user: nobody\n" + daemonYAML(s, "5s", listenerYAML("ip", addr, up, "ip")+listenerKeys)
		if workers > 0 {
			cfg = fmt.Sprintf("workers: %d\n", workers) + cfg
		}
		return cfg
	}
	cfg := config("")
	// nobody must read the configuration and run the binary.
	os.Chmod(filepath.Dir(splicerBinary(t)), 0o755)
	d := s.startRunReadable(t, cfg)
	if workers > 0 {
		t.Cleanup(func() { stopMaster(t, d.pid()) })
		waitUntil(t, "every worker ready", make(chan error), func() bool { return s.adminOK("GET", "/ready") == nil })
	}

	tr := s.startTransfer(t, addr, 64<<20)
	// The root process exits once the user's process serves: wait on
	// the admin endpoint, not on it.
	waitUntil(t, "the transfer spliced by ip", make(chan error), func() bool { return s.splicedBy("ip") })
	tr.wait(t, 60*time.Second)

	pids := []int{d.pid()}
	if workers > 0 {
		pids = append(pids, workerPids(t, d.pid())...)
		if len(pids) != 1+workers {
			t.Fatalf("master %d and workers %v, want %d workers", pids[0], pids[1:], workers)
		}
	}
	for _, pid := range pids {
		checkRunsAsNobody(t, pid)
	}
	// The root process stepped aside.
	select {
	case err := <-d.exited:
		if err != nil {
			t.Errorf("the root process: %v, want exit 0 after the handover", err)
		}
	default:
		t.Error("the root process is still running after handing over")
	}

	if workers > 0 {
		// The master running as the user took each listener's program
		// over from the root process: a reload that sets a per-client
		// limit still has one worker see all of a client's connections.
		writeFile(t, d.configPath(), []byte(config("    max_connections_per_client: 1\n")))
		if err := s.adminOK("POST", "/reload"); err != nil {
			t.Fatal(err)
		}
		dial := func() net.Conn {
			c, err := s.dial(context.Background(), "tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		if !served(t, dial()) {
			t.Fatal("the client's first connection refused under a limit of 1")
		}
		for i := range 3 {
			if served(t, dial()) {
				t.Errorf("the client's connection %d served under a limit of 1", i+2)
			}
		}
	}
}

// checkRunsAsNobody checks that process pid runs as nobody with
// CAP_NET_ADMIN and CAP_BPF but not CAP_SYS_ADMIN, and no_new_privs.
func checkRunsAsNobody(tb testing.TB, pid int) {
	tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("the serving process (pid %d): %v", pid, err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if uid := strings.Fields(fields["Uid"]); len(uid) < 2 || uid[1] != "65534" {
		tb.Errorf("process %d: Uid %q, want 65534 (nobody)", pid, fields["Uid"])
	}
	eff, err := strconv.ParseUint(fields["CapEff"], 16, 64)
	if err != nil {
		tb.Fatalf("process %d: CapEff %q: %v", pid, fields["CapEff"], err)
	}
	if eff&(1<<21) != 0 {
		tb.Errorf("process %d: CapEff %s has CAP_SYS_ADMIN", pid, fields["CapEff"])
	}
	if eff&(1<<12) == 0 || eff&(1<<39) == 0 {
		tb.Errorf("process %d: CapEff %s lacks CAP_NET_ADMIN or CAP_BPF, which engine ip needs", pid, fields["CapEff"])
	}
	if fields["NoNewPrivs"] != "1" {
		tb.Errorf("process %d: NoNewPrivs %q, want 1", pid, fields["NoNewPrivs"])
	}
}

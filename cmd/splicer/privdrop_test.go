// Least privilege in the lab: `splicer run` started as root with `user: nobody` serves as uid 65534 with only the capabilities its engines need (none ambient, the bounding set no wider), with no_new_privs, and still splices with engine ip, with one process or a master and workers.

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

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestRunAsUserStillSplicesWithIP: with ip and sockmap on, the serving
// process keeps what they need; with both off, nothing but
// CAP_NET_BIND_SERVICE where it binds a port below 1024.
func TestRunAsUserStillSplicesWithIP(t *testing.T) {
	t.Run("without ip and sockmap", func(t *testing.T) {
		testenv.RequireRoot(t)
		t.Run("high port", func(t *testing.T) { testRunAsUserWithoutBPF(t, freeLoopback(t), 0) })
		t.Run("port below 1024", func(t *testing.T) {
			testRunAsUserWithoutBPF(t, freeLowLoopback(t), 1<<unix.CAP_NET_BIND_SERVICE)
		})
	})
	testRunAsUser(t, 0)
}

// ipCaps are the capabilities engine ip needs (and sockmap's are among
// them): CAP_NET_ADMIN, CAP_NET_RAW, CAP_PERFMON and CAP_BPF.
const ipCaps = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_PERFMON | 1<<unix.CAP_BPF

// testRunAsUserWithoutBPF runs a copy and pipe forwarder on loopback as
// nobody, listening on addr, and wants exactly caps in its sets.
func testRunAsUserWithoutBPF(t *testing.T, addr string, caps uint64) {
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	os.Chmod(filepath.Dir(splicerBinary(t)), 0o755)
	cfg := "user: nobody\nengines: {ip: {enabled: false}, sockmap: {enabled: false}}\n" +
		daemonYAML(s, "1s", listenerYAML("plain", addr, up, "auto"))
	d := s.startRunReadable(t, cfg)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !served(t, c) {
		t.Fatalf("%s: no echo", addr)
	}
	// The root process ends once the user's process serves, its
	// capabilities settled.
	select {
	case <-d.exited:
	case <-time.After(waitFor):
		t.Fatal("the root process is still running after handing over")
	}
	checkRunsAsNobody(t, d.pid(), caps)
}

// freeLowLoopback is a loopback address with a free port below 1024.
func freeLowLoopback(tb testing.TB) string {
	tb.Helper()
	for port := 1023; port > 600; port-- {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
	tb.Fatal("no free loopback port below 1024")
	return ""
}

// TestRunAsUserWithWorkers: the same with two workers: the root process
// binds every socket and steps aside, and the master and both workers
// run as the user with only the engines' capabilities.
func TestRunAsUserWithWorkers(t *testing.T) { testRunAsUser(t, 2) }

func testRunAsUser(t *testing.T, workers int) {
	testenv.RequireRoot(t)
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	up := s.upstream(t, origin.Echo)
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
		checkRunsAsNobody(t, pid, ipCaps)
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
// no_new_privs, exactly caps effective and in its bounding set (no
// CAP_SYS_ADMIN, nothing it could regain), and no ambient capability
// (nothing a program it runs would inherit).
func checkRunsAsNobody(tb testing.TB, pid int, caps uint64) {
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
	for set, want := range map[string]uint64{"CapEff": caps, "CapPrm": caps, "CapBnd": caps, "CapAmb": 0} {
		got, err := strconv.ParseUint(fields[set], 16, 64)
		if err != nil {
			tb.Fatalf("process %d: %s %q: %v", pid, set, fields[set], err)
		}
		if got != want {
			tb.Errorf("process %d: %s %016x, want %016x", pid, set, got, want)
		}
	}
	if fields["NoNewPrivs"] != "1" {
		tb.Errorf("process %d: NoNewPrivs %q, want 1", pid, fields["NoNewPrivs"])
	}
}

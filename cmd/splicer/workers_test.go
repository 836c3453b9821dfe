// 'splicer run' with workers: the processes share each listener, a killed worker is restarted, a reload and an upgrade reach every worker without refusing a connection, the workers leave with a killed master, and ip splices in each worker.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// workersYAML is daemonYAML with n workers.
func workersYAML(s *site, n int, grace string, listeners ...string) string {
	return fmt.Sprintf("workers: %d\n", n) + daemonYAML(s, grace, listeners...)
}

// startWorkers runs a master with the configuration and waits until every
// worker is ready.
func (s *site) startWorkers(tb testing.TB, cfg string) *daemonProc {
	tb.Helper()
	d := s.startRun(tb, cfg)
	master := d.cmd.Process.Pid
	tb.Cleanup(func() { stopMaster(tb, master) }) // before startRun's SIGKILL
	waitUntil(tb, "every worker ready", d.exited, func() bool { return s.adminOK("GET", "/ready") == nil })
	return d
}

// stopMaster stops a master and its workers with SIGTERM, and kills
// whatever is left after 20 s: no test leaves a worker behind.
func stopMaster(tb testing.TB, master int) {
	tb.Helper()
	pids := workerPids(tb, master)
	syscall.Kill(master, syscall.SIGTERM)
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range append(pids, master) {
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// workerPids are the master's child processes, sorted.
func workerPids(tb testing.TB, master int) []int {
	tb.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", master))
	var pids []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(field)
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// gone reports whether no process has pid.
func gone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }

// metricByWorker reads a metric from the admin endpoint: its value per
// worker label, summed over the other labels, for series whose labels
// contain match.
func (s *site) metricByWorker(tb testing.TB, name, match string) map[string]float64 {
	tb.Helper()
	resp, err := s.admin.Get("http://" + s.adminAddr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		_, rest, _ := strings.Cut(line, `worker="`)
		w, _, _ := strings.Cut(rest, `"`)
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[w] += v
	}
	return out
}

// pingN pings addr n times and fails the test at the first error.
func (s *site) pingN(tb testing.TB, addr string, n int) {
	tb.Helper()
	for i := range n {
		if err := s.ping(addr); err != nil {
			tb.Fatalf("connection %d of %d through %s: %v", i+1, n, addr, err)
		}
	}
}

// TestWorkersShareAListener: two workers accept on one listener, the
// master's /metrics, /flows and /upstreams speak for both, a worker
// killed is restarted on the same socket, and SIGTERM stops them all.
func TestWorkersShareAListener(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.echoUpstream(t)
	addr := freeLoopback(t)
	d := s.startWorkers(t, workersYAML(s, 2, "5s", listenerYAML("echo", addr, up, "pipe")))
	master := d.cmd.Process.Pid
	pids := workerPids(t, master)
	if len(pids) != 2 {
		t.Fatalf("master %d has children %v, want two workers", master, pids)
	}

	s.pingN(t, addr, 40)
	accepted := s.metricByWorker(t, "splicer_connections_accepted_total", `listener="echo"`)
	if accepted["0"] == 0 || accepted["1"] == 0 || accepted["0"]+accepted["1"] != 40 {
		t.Errorf("connections accepted by worker: %v, want 40 spread over workers 0 and 1", accepted)
	}
	// As root the master's sk_reuseport program hands them out in turn
	// (the kernel's hash would give 20 and 20 one time in eight).
	if os.Geteuid() == 0 && accepted["0"] != 20 {
		t.Errorf("connections accepted by worker: %v, want 20 each, in turn", accepted)
	}

	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.Write([]byte("x"))
	held.Read(make([]byte, 1))
	if f := s.findFlow(func(f map[string]any) bool { return f["worker"] != nil }); f == nil {
		t.Errorf("/flows has no pair naming its worker")
	}
	resp, err := s.admin.Get("http://" + s.adminAddr + "/upstreams")
	if err != nil {
		t.Fatal(err)
	}
	var servers []map[string]any
	decodeJSON(t, resp, &servers)
	if len(servers) != 1 || servers[0]["server"] != up {
		t.Errorf("/upstreams: %v, want the one server once", servers)
	}
	held.Close()
	if err := s.adminOK("POST", "/upstreams/drain?server="+up); err != nil {
		t.Fatal(err)
	}
	if drained := s.metricByWorker(t, "splicer_upstream_drained", ""); drained["0"] != 1 || drained["1"] != 1 {
		t.Errorf("splicer_upstream_drained by worker after a drain through the master: %v, want 1 in both", drained)
	}
	if err := s.adminOK("POST", "/upstreams/ready?server="+up); err != nil {
		t.Fatal(err)
	}

	syscall.Kill(pids[0], syscall.SIGKILL)
	waitUntil(t, "the killed worker restarted", d.exited, func() bool {
		now := workerPids(t, master)
		return len(now) == 2 && !slices.Contains(now, pids[0])
	})
	if r := s.metricByWorker(t, "splicer_worker_restarts_total", ""); len(r) != 0 {
		t.Errorf("restarts per worker %v: the master's own counter has no worker label", r)
	}
	waitUntil(t, "every worker ready again", d.exited, func() bool { return s.adminOK("GET", "/ready") == nil })
	s.pingN(t, addr, 20)
	if !strings.Contains(d.logs(), `msg="worker exited: restarting it" worker=`) {
		t.Errorf("the master did not log the restart")
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	waitExitZero(t, "the master after SIGTERM", d.exited, 20*time.Second)
	for _, pid := range workerPids(t, master) {
		t.Errorf("worker %d outlived its master", pid)
	}
	if _, err := os.Stat(d.pidFile); !os.IsNotExist(err) {
		t.Errorf("pid file after the master stopped: %v", err)
	}
}

// decodeJSON decodes an admin answer.
func decodeJSON(tb testing.TB, resp *http.Response, v any) {
	tb.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("%s: %v", resp.Request.URL, err)
	}
}

// TestWorkersReloadAndUpgrade: a SIGHUP reaches both workers (a listener
// added serves in each, one removed refuses), and 'splicer upgrade'
// replaces every worker and the master's binary (same pid) while a
// transfer runs and 100 connections a second arrive: none refused.
func TestWorkersReloadAndUpgrade(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.echoUpstream(t)
	keep, removed, added := freeLoopback(t), freeLoopback(t), freeLoopback(t)
	d := s.startWorkers(t, workersYAML(s, 2, "30s", listenerYAML("keep", keep, up, "copy"), listenerYAML("removed", removed, up, "pipe")))
	master := d.cmd.Process.Pid
	tr := s.startTransfer(t, keep, 48<<20)

	writeFile(t, d.configPath(), []byte(workersYAML(s, 2, "30s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, up, "pipe"))))
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the added listener to serve", d.exited, func() bool { return s.ping(added) == nil })
	s.pingN(t, added, 30)
	if got := s.metricByWorker(t, "splicer_connections_accepted_total", `listener="added"`); got["0"] == 0 || got["1"] == 0 {
		t.Errorf("the added listener's connections by worker: %v, want both workers", got)
	}
	if err := s.ping(removed); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the removed listener: %v, want connection refused", err)
	}

	before := workerPids(t, master)
	p := s.startPinger(keep, 100)
	if out, err := s.command(context.Background(), splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
		t.Fatalf("splicer upgrade: %v: %s", err, out)
	}
	waitUntil(t, "the master on its new binary", d.exited, func() bool { return strings.Contains(d.logs(), `msg="master upgraded"`) })
	waitUntil(t, "every worker ready after the upgrade", d.exited, func() bool { return s.adminOK("GET", "/ready") == nil })
	time.Sleep(500 * time.Millisecond)
	p.finish(t)
	tr.wait(t, 90*time.Second)
	if pid := d.pid(); pid != master {
		t.Errorf("pid file names %d after the upgrade, want the master's %d (it replaces its binary in place)", pid, master)
	}
	waitUntil(t, "the old workers gone", d.exited, func() bool {
		now := workerPids(t, master)
		return len(now) == 2 && !slices.Contains(now, before[0]) && !slices.Contains(now, before[1])
	})
	s.pingN(t, keep, 10)
	s.pingN(t, added, 10)
}

// TestWorkersLeaveWithTheirMaster: a master killed outright leaves no
// worker serving on: each notices, drains and exits.
func TestWorkersLeaveWithTheirMaster(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.echoUpstream(t)
	d := s.startWorkers(t, workersYAML(s, 2, "1s", listenerYAML("echo", freeLoopback(t), up, "copy")))
	pids := workerPids(t, d.cmd.Process.Pid)
	if len(pids) != 2 {
		t.Fatalf("workers %v, want two", pids)
	}
	d.cmd.Process.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !gone(pid) {
			t.Errorf("worker %d still runs 15 s after its master was killed", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestLabWorkersSpliceWithIP: with two workers on an ip listener, each
// worker splices pairs with ip in a pin directory of its own, every
// transfer arrives intact, and after SIGTERM nothing stays pinned.
func TestLabWorkersSpliceWithIP(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	pinDir := filepath.Join(testenv.MountBPFFS(t), "splicer", "workers")
	up := s.echoUpstream(t)
	addr := net.JoinHostPort(s.fwdIP, "17400")
	d := s.startWorkers(t, workersYAML(s, 2, "5s", listenerYAML("ip", addr, up, "ip"))+
		fmt.Sprintf("engines:\n  ip: {time_wait: 1s, pin_dir: %s}\n", pinDir))

	var transfers []*transfer
	for range 16 {
		transfers = append(transfers, s.startTransfer(t, addr, 8<<20))
	}
	for _, tr := range transfers {
		tr.wait(t, 90*time.Second)
	}
	spliced := s.metricByWorker(t, "splicer_splice_transitions_total", `engine="ip"`)
	if spliced["0"] == 0 || spliced["1"] == 0 {
		t.Errorf("ip splices by worker: %v, want both workers", spliced)
	}
	for _, w := range []string{"worker-0", "worker-1"} {
		if _, err := os.Stat(filepath.Join(pinDir, w)); err != nil {
			t.Errorf("pin directory of %s: %v", w, err)
		}
	}

	// An upgrade in the middle of long transfers spliced by ip in both
	// workers: each arrives intact.
	transfers = nil
	for range 4 {
		transfers = append(transfers, s.startTransfer(t, addr, 96<<20))
	}
	splicedIn := func(worker float64) bool {
		return s.findFlow(func(f map[string]any) bool {
			return f["worker"] == worker && f["engine"] == "ip" && f["state"] == "spliced"
		}) != nil
	}
	waitUntil(t, "transfers spliced by ip in both workers", d.exited, func() bool { return splicedIn(0) && splicedIn(1) })
	if out, err := s.command(context.Background(), splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
		t.Fatalf("splicer upgrade: %v: %s", err, out)
	}
	for _, tr := range transfers {
		tr.wait(t, 120*time.Second)
	}
	waitUntil(t, "the master on its new binary", d.exited, func() bool { return strings.Contains(d.logs(), `msg="master upgraded"`) })
	s.pingN(t, addr, 10)
	// A retired worker leaves what it still forwards pinned; its
	// successor adopts it once it has gone, and unpins it once over.
	waitUntil(t, "each worker's pin directory holding only its own datapath", d.exited, func() bool {
		for _, w := range []string{"worker-0", "worker-1"} {
			if dirs, _ := os.ReadDir(filepath.Join(pinDir, w)); len(dirs) != 1 {
				return false
			}
		}
		return true
	})

	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("master still running 30 s after SIGTERM")
	}
	var left []string
	filepath.WalkDir(pinDir, func(path string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			left = append(left, path)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("still pinned after the workers stopped: %v", left)
	}
}

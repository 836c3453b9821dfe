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
	"net/netip"
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
	"github.com/splicer/splicer/origin"
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

// listeningHeldBy counts the sockets process pid holds that listen on
// addr (IPv4), from /proc: its descriptors' inodes among the listening
// sockets of its network namespace.
func listeningHeldBy(tb testing.TB, pid int, addr string) int {
	tb.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	ip := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		tb.Fatal(err)
	}
	listening := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st ... inode (the tenth field)
		if f := strings.Fields(line); len(f) > 9 && f[1] == want && f[3] == "0A" {
			listening["socket:["+f[9]+"]"] = true
		}
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && listening[target] {
			n++
		}
	}
	return n
}

// gone reports whether no process has pid.
func gone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }

// metricByWorker reads a metric from the admin endpoint: its value per
// worker label ("" for none: the master's own), summed over the other
// labels, for series whose labels contain match.
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
		if !(strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ")) || !strings.Contains(line, match) {
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
	up := s.upstream(t, origin.Echo)
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

	s.killWorker(t, d, pids[0])
	if r := s.metricByWorker(t, "splicer_worker_restarts_total", ""); len(r) != 1 || r[""] != 1 {
		t.Errorf("restarts per worker %v, want 1 on the master's own counter, which has no worker label", r)
	}
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

// killWorker kills worker pid of the master d runs and waits until the
// master has restarted it and every worker is ready.
func (s *site) killWorker(tb testing.TB, d *daemonProc, pid int) {
	tb.Helper()
	master := d.cmd.Process.Pid
	n := len(workerPids(tb, master))
	syscall.Kill(pid, syscall.SIGKILL)
	waitUntil(tb, "the killed worker restarted", d.exited, func() bool {
		now := workerPids(tb, master)
		return len(now) == n && !slices.Contains(now, pid)
	})
	waitUntil(tb, "every worker ready again", d.exited, func() bool { return s.adminOK("GET", "/ready") == nil })
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
// added serves in each, bound by the master, one removed refuses), and
// 'splicer upgrade' replaces every worker and the master's binary (same
// pid) while a transfer runs and 100 connections a second arrive: none
// refused; a reload after it adds a listener the same way.
func TestWorkersReloadAndUpgrade(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
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
	// The master bound the added listener for each worker, as at the
	// start: its queue outlives a worker, its program spreads it.
	if n := listeningHeldBy(t, master, added); n != 2 {
		t.Errorf("the master holds %d sockets listening on the added %s, want one per worker", n, added)
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

	// The master on its new binary serves its workers their sockets too.
	late := freeLoopback(t)
	writeFile(t, d.configPath(), []byte(workersYAML(s, 2, "30s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, up, "pipe"), listenerYAML("late", late, up, "copy"))))
	if err := s.adminOK("POST", "/reload"); err != nil {
		t.Fatal(err)
	}
	s.pingN(t, late, 10)
	if n := listeningHeldBy(t, master, late); n != 2 {
		t.Errorf("after its upgrade the master holds %d sockets listening on the added %s, want one per worker", n, late)
	}
	if strings.Contains(d.logs(), "binds its own") {
		t.Errorf("a worker bound a listener's socket of its own:\n%s", d.logs())
	}
}

// TestWorkersLeaveWithTheirMaster: a master killed outright leaves no
// worker serving on: each notices, drains and exits.
func TestWorkersLeaveWithTheirMaster(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
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
	up := s.upstream(t, origin.Echo)
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

// dialFrom connects to addr from the local address from (port chosen by
// the kernel), closed at the test's end.
func dialFrom(tb testing.TB, from, addr string) net.Conn {
	tb.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// served reports whether the echo behind c answers, false where the
// forwarder closed c unanswered (refused).
func served(tb testing.TB, c net.Conn) bool {
	tb.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		return false
	}
	_, err := c.Read(make([]byte, 1))
	return err == nil
}

// TestWorkersLimitEachClient: with max_connections_per_client, every
// connection of one client address reaches one worker, so the limit holds
// across the workers; a reload that clears it spreads connections in turn
// again, and one after an upgrade of the master sets it again.
func TestWorkersLimitEachClient(t *testing.T) {
	testenv.RequireRoot(t) // the sk_reuseport program
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	addr := freeLoopback(t)
	limited := func(n int) string {
		return workersYAML(s, 2, "5s", listenerYAML("limited", addr, up, "copy")+fmt.Sprintf("    max_connections_per_client: %d\n", n))
	}
	d := s.startWorkers(t, limited(2))
	master := d.cmd.Process.Pid
	limitHolds := func(from string) {
		t.Helper()
		for i := range 2 {
			if !served(t, dialFrom(t, from, addr)) {
				t.Fatalf("connection %d of 2 from %s refused under a limit of 2", i+1, from)
			}
		}
		for i := range 3 {
			if served(t, dialFrom(t, from, addr)) {
				t.Errorf("connection %d past the limit of 2 from %s served: the workers each counted their own", i+3, from)
			}
		}
	}
	limitHolds("127.0.0.2")
	limitHolds("127.0.0.3")
	if got := s.metricByWorker(t, "splicer_connections_closed_total", `reason="max_connections_per_client"`); got["0"]+got["1"] != 6 {
		t.Errorf("refused for max_connections_per_client by worker: %v, want 6 in all", got)
	}

	reload := func(cfg string) {
		t.Helper()
		writeFile(t, d.configPath(), []byte(cfg))
		if out, err := s.command(context.Background(), splicerBinary(t), "reload", "--admin", s.adminAddr).CombinedOutput(); err != nil {
			t.Fatalf("splicer reload: %v: %s", err, out)
		}
	}
	reload(limited(0))
	before := s.metricByWorker(t, "splicer_connections_accepted_total", `listener="limited"`)
	s.pingN(t, addr, 20)
	after := s.metricByWorker(t, "splicer_connections_accepted_total", `listener="limited"`)
	if a, b := after["0"]-before["0"], after["1"]-before["1"]; a != 10 || b != 10 {
		t.Errorf("without the limit, 20 connections from one client reached the workers %v and %v, want 10 each, in turn", a, b)
	}

	if out, err := s.command(context.Background(), splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
		t.Fatalf("splicer upgrade: %v: %s", err, out)
	}
	waitUntil(t, "the master on its new binary", d.exited, func() bool { return strings.Contains(d.logs(), `msg="master upgraded"`) })
	waitUntil(t, "every worker ready after the upgrade", d.exited, func() bool { return s.adminOK("GET", "/ready") == nil })
	reload(limited(2))
	limitHolds("127.0.0.4")
	if pid := d.pid(); pid != master {
		t.Errorf("pid file names %d, want the master's %d", pid, master)
	}
}

// TestMasterWaitsForRetiredWorkers: on SIGTERM the master stays until
// the workers an upgrade retired have drained their pairs too, not only
// its current ones: under systemd what a master leaves behind is killed.
// The count of restarts outlives the master's upgrade.
func TestMasterWaitsForRetiredWorkers(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	addr := freeLoopback(t)
	d := s.startWorkers(t, workersYAML(s, 2, "30s", listenerYAML("echo", addr, up, "copy")))
	master := d.cmd.Process.Pid
	s.killWorker(t, d, workerPids(t, master)[0])
	before := workerPids(t, master)
	held := dialFrom(t, "127.0.0.1", addr)
	if !served(t, held) {
		t.Fatal("the held connection is not served")
	}
	if out, err := s.command(context.Background(), splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
		t.Fatalf("splicer upgrade: %v: %s", err, out)
	}
	waitUntil(t, "the master on its new binary", d.exited, func() bool { return strings.Contains(d.logs(), `msg="master upgraded"`) })
	waitUntil(t, "the retired worker without pairs gone", d.exited, func() bool { return gone(before[0]) != gone(before[1]) })
	if r := s.metricByWorker(t, "splicer_worker_restarts_total", ""); r[""] != 1 {
		t.Errorf("splicer_worker_restarts_total after the master's upgrade: %v, want the 1 restart before it", r[""])
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		t.Fatal("the master exited while a retired worker still drained its pair")
	case <-time.After(2 * time.Second):
	}
	if !served(t, held) {
		t.Error("the retired worker's pair broke before its grace ended")
	}
	held.Close()
	waitExitZero(t, "the master once the retired worker drained", d.exited, 20*time.Second)
	for _, pid := range before {
		if !gone(pid) {
			t.Errorf("retired worker %d outlived its master", pid)
		}
	}
}

// TestWorkersLeaveSignalsToTheirMaster: a SIGHUP or SIGUSR2 sent to a
// worker (pkill -HUP splicer) is ignored, logged: a worker reloading on
// its own would bind a socket the master's program never picks. The
// master's reload then adds the listener in every worker.
func TestWorkersLeaveSignalsToTheirMaster(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	keep, added := freeLoopback(t), freeLoopback(t)
	d := s.startWorkers(t, workersYAML(s, 2, "5s", listenerYAML("keep", keep, up, "copy")))
	master := d.cmd.Process.Pid
	workers := workerPids(t, master)
	writeFile(t, d.configPath(), []byte(workersYAML(s, 2, "5s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, up, "copy"))))
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR2} {
		syscall.Kill(workers[0], sig)
	}
	waitUntil(t, "the worker to log both signals ignored", d.exited, func() bool {
		return strings.Count(d.logs(), "signal ignored: a worker reloads and upgrades when its master does") == 2
	})
	if err := s.ping(added); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the listener a worker's own SIGHUP would have added: %v, want connection refused", err)
	}
	if now := workerPids(t, master); !slices.Equal(now, workers) {
		t.Errorf("workers %v after SIGUSR2 to one, want %v unchanged", now, workers)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the added listener to serve", d.exited, func() bool { return s.ping(added) == nil })
	s.pingN(t, added, 10)
	if n := listeningHeldBy(t, master, added); n != 2 {
		t.Errorf("the master holds %d sockets listening on %s, want one per worker", n, added)
	}
}

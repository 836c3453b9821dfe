// The auto-workers switch: splicer's http-reverse with engine auto run as a master and a worker process per forwarder CPU (workers), nginx's process model, beside auto's one process with a thread per CPU.

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
)

// workersLocalPorts keeps the workers' ip port shares apart from the
// main splicer process's (engines.ip.local_ports' default) and outside
// the kernel's ephemeral range, which the other experiments need.
const workersLocalPorts = "61000-64999"

// startWorkersSwitch runs a second splicer process with one http-reverse
// listener, engine auto, and workers: one per CPU the forwarders get
// (every CPU unpinned, splitCPUs' share with --pin). Its CPU time is the
// master's and the workers'.
func (e *Env) startWorkersSwitch(ctx context.Context, a addressing, pin bool) {
	t := &Target{Name: "auto-workers"}
	e.SwitchPeers = append(e.SwitchPeers, t)
	if !slices.ContainsFunc(e.SwitchPeers, func(p *Target) bool { return p.Name == "auto" }) {
		t.Unavailable = "engine ip cannot run here (auto is then pipe, which has its own rows)"
		return
	}
	n := runtime.NumCPU()
	if pin {
		n = len(splitCPUs(n, true).fwd)
	}
	if n < 2 {
		t.Unavailable = fmt.Sprintf("%d CPU for the forwarders: one worker is auto's one process", n)
		return
	}
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts["auto-workers"]+switchOffset))
	cfg := fmt.Sprintf("log: {level: warn, format: text}\nshutdown_timeout: 1s\nworkers: %d\nengines: {ip: {local_ports: %s}}\nlisteners:\n", n, workersLocalPorts) +
		fmt.Sprintf("  - {name: workers-switch, listen: %q, proxy: http-reverse, engine: auto, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
			t.switchAddr, a.switchOrigin)
	path := filepath.Join(e.dir, "workers.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Unavailable = err.Error()
		return
	}
	// TMPDIR: the master's directory of worker sockets goes with the
	// Env's directory, as the master is killed at the end.
	cmd, err := e.startListening(ctx, e.fwd, "workers", t.switchAddr, "env", "TMPDIR="+e.dir, e.splicer, "run", "--config", path)
	if cmd != nil {
		// The master: CPU time and pinning take a process's tree.
		t.pids = func() []int { return []int{cmd.Process.Pid} }
	}
	if err != nil {
		t.Unavailable = err.Error()
	}
}

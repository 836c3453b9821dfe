// The idle experiment: up to 100,000 idle pairs spliced by ip through one tcp listener at once; what they cost the forwarder in descriptors and RSS, and whether each still echoes at the end.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// idlePort and idleAdmin are where the idle experiment's own splicer
	// listens, in the forwarder namespace.
	idlePort  = 7950
	idleAdmin = "127.0.0.1:9903"
	// idleLocalPorts is its engines.ip.local_ports: 20,000 ports toward
	// each origin process, apart from the ranges of the bench's other
	// splicers and from the kernel's ephemeral range.
	idleLocalPorts = "10000-29999"
	// idleOriginPort is the first origin port; each origin process
	// listens on one port of its own.
	idleOriginPort = 6100
	// idlePerProcess bounds the sockets of a helper process, under the
	// open-file limit (20,000 here) and, per origin, under the 20,000
	// ports of idleLocalPorts.
	idlePerProcess = 15000
	// idlePerSource bounds the connections from one client address to
	// the listener's one port, under the kernel's ephemeral range
	// (28,232 ports by default).
	idlePerSource = 20000
	// idleBatch is how many connections are opened before waiting for
	// the forwarder to have spliced them all and closed their sockets.
	idleBatch = 1000
	// idleSettle lets the last splices' garbage be collected and freed
	// memory go back before the reading.
	idleSettle = 5 * time.Second
)

// idleUse is one reading of the forwarder process.
type idleUse struct {
	rss, bpf, fds float64
}

// idleRun is what one count of pairs gave.
type idleRun struct {
	pairs, echoed, spliced int
	base, held             idleUse
	firstErr               string
}

// Idle opens up to Settings.IdlePairs idle pairs through one tcp listener
// on engine ip at once, a fresh splicer process per count, and reports
// the forwarder's descriptors and RSS per pair once all are spliced,
// and how many still echo at the end.
func Idle(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "idle"}
	if e.Lab == nil {
		res.Notes = append(res.Notes, "idle needs the lab (root): not measured")
		return res, nil
	}
	if t := e.Target("ip"); t == nil || t.Unavailable != "" {
		why := "engine ip is not available"
		if t != nil {
			why = t.Unavailable
		}
		res.Unavailable = append(res.Unavailable, Missing{"ip", why})
		return res, nil
	}
	p := newProgress(s.Progress, "idle", len(s.IdlePairs))
	for _, n := range s.IdlePairs {
		p.step(fmt.Sprintf("%d idle pairs", n))
		r, err := e.idleOf(ctx, n)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("%d pairs: failed, no row: %s", n, oneLine(err)))
			continue
		}
		res.Rows = append(res.Rows, r.rows()...)
		if r.firstErr != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("%d pairs: first echo failure: %s", n, r.firstErr))
		}
	}
	p.finish()
	res.Notes = append(res.Notes,
		"each count: a fresh splicer process, one tcp listener on engine ip (splice_after 0s, idle_timeout 0s) to one origin port per 15,000 pairs; "+
			"the client's ends from one client address per 20,000 pairs (lab.AddClientAddrs), helper processes holding at most 15,000 sockets each (the open-file limit); "+
			"opened 1,000 at a time, each batch spliced (the forwarder's descriptors back to their baseline) before the next",
		"rss_bytes_per_pair: the forwarder's VmRSS growth over its baseline with no pair, read 5 s after the last splice (no forced GC), divided by the pairs; "+
			"bpf_bytes_per_pair: the growth of the memlock of its BPF maps (the flow hash; the preallocated directional entries cost the same at 0 pairs); "+
			"fds: the forwarder's open descriptors with every pair spliced; pairs_echoing: pairs whose client sent a 16-byte message at the end and read it back from the origin through the forwarder")
	return res, nil
}

// rows are one count's rows, its engine column naming the count.
func (r idleRun) rows() []Row {
	name := fmt.Sprintf("ip, %d pairs", r.pairs)
	c := float64(r.pairs)
	row := func(metric, unit string, v float64) Row {
		return Row{Engine: name, Metric: metric, Value: v, Min: v, Max: v, Unit: unit, Runs: 1, Pairs: r.pairs, Tool: "splicer-bench"}
	}
	return []Row{
		row("pairs_spliced", "pairs", float64(r.spliced)),
		row("pairs_echoing", "pairs", float64(r.echoed)),
		row("fds", "fds", r.held.fds),
		row("rss_bytes_per_pair", "B", (r.held.rss-r.base.rss)/c),
		row("bpf_bytes_per_pair", "B", (r.held.bpf-r.base.bpf)/c),
		row("rss_mb", "MB", r.held.rss/1e6),
	}
}

// idleOf runs one count: origins, a splicer, clients; n idle pairs.
func (e *Env) idleOf(ctx context.Context, n int) (idleRun, error) {
	run := idleRun{pairs: n}
	ctx, cancel := context.WithCancel(ctx)
	var pids []int
	defer func() { cancel(); waitGone(pids) }()
	self, err := os.Executable()
	if err != nil {
		return run, err
	}
	if err := e.idleSysctls(); err != nil {
		return run, err
	}
	extra, err := e.Lab.AddClientAddrs(ceilDiv(n, idlePerSource) - 1)
	if err != nil {
		return run, err
	}
	sources := append([]netip.Addr{e.Lab.Cfg.Client.Addr()}, extra...)
	origins, err := e.idleOrigins(ctx, self, ceilDiv(n, idlePerProcess), &pids)
	if err != nil {
		return run, err
	}
	pid, listen, err := e.idleSplicer(ctx, origins, n)
	if pid != 0 {
		pids = append(pids, pid)
	}
	if err != nil {
		return run, err
	}
	settle()
	run.base = readIdleUse(pid)
	clients, err := e.idleClients(ctx, self, listen, sources, ceilDiv(n, idlePerProcess), &pids)
	if err != nil {
		return run, err
	}
	defer clients.close()
	if err := e.idleOpen(ctx, clients, pid, run.base.fds, n); err != nil {
		return run, err
	}
	time.Sleep(idleSettle)
	run.held = readIdleUse(pid)
	flows, err := e.bigFlows(ctx)
	if err != nil {
		return run, fmt.Errorf("/flows with %d pairs: %w", n, err)
	}
	for _, f := range flows {
		if f.State == "spliced" && f.Engine == "ip" {
			run.spliced++
		}
	}
	run.echoed, run.firstErr, err = clients.echo()
	return run, err
}

// bigFlows fetches the idle splicer's /flows, a JSON array of every pair:
// at 100,000 pairs on a loaded machine it takes longer than the admin
// client's 5 s.
func (e *Env) bigFlows(ctx context.Context) ([]Flow, error) {
	hc := &http.Client{Transport: e.admin().Transport, Timeout: 2 * time.Minute}
	return e.flowsWith(ctx, hc, idleAdmin)
}

// idleSysctls widen the accept queues the experiment's bursts of
// connections meet.
func (e *Env) idleSysctls() error {
	for _, ns := range []interface{ Sysctl(k, v string) error }{e.Lab.Fwd, e.Lab.Server} {
		for _, kv := range [][2]string{{"net.core.somaxconn", "8192"}, {"net.ipv4.tcp_max_syn_backlog", "8192"}} {
			if err := ns.Sysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// idleOrigins starts k echo processes in the server namespace, each on
// a port of its own, and returns their addresses.
func (e *Env) idleOrigins(ctx context.Context, self string, k int, pids *[]int) ([]string, error) {
	var addrs []string
	for i := range k {
		addr := net.JoinHostPort(e.addrs.server, strconv.Itoa(idleOriginPort+i))
		cmd, err := e.startListening(ctx, e.server, fmt.Sprintf("idle-origin-%d", i), addr, self, IdleHelperCommand, "serve", addr)
		if cmd != nil {
			*pids = append(*pids, cmd.Process.Pid)
		}
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// idleSplicer starts the experiment's splicer with one tcp listener on
// ip, balancing over origins, and returns its pid and listen address.
func (e *Env) idleSplicer(ctx context.Context, origins []string, n int) (int, string, error) {
	listen := net.JoinHostPort(e.addrs.fwd, strconv.Itoa(idlePort))
	ups := make([]string, len(origins))
	for i, o := range origins {
		ups[i] = strconv.Quote(o)
	}
	cfg := fmt.Sprintf("admin: %q\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\n"+
		"engines: {ip: {local_ports: %s, max_pairs: %d, idle_timeout: 0s, pin_dir: off}}\nlisteners:\n"+
		"  - {name: idle, listen: %q, upstream: [%s], engine: ip, max_connections: 0, idle_timeout: 0s, splice_after: 0s}\n",
		idleAdmin, idleLocalPorts, n+4096, listen, strings.Join(ups, ", "))
	path := filepath.Join(e.dir, "idle.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return 0, "", err
	}
	cmd, err := e.startListening(ctx, e.fwd, "idle", listen, e.splicer, "run", "--config", path)
	if err != nil {
		if cmd != nil {
			return cmd.Process.Pid, "", err
		}
		return 0, "", err
	}
	if err := e.waitFlows(ctx, idleAdmin, "", 0); err != nil {
		return cmd.Process.Pid, "", err
	}
	return cmd.Process.Pid, listen, nil
}

// readIdleUse reads the forwarder process's RSS, BPF map memory and
// descriptors.
func readIdleUse(pid int) idleUse {
	bpf, fds := bpfMapMemory(pid)
	return idleUse{rss: statusField(pid, "VmRSS"), bpf: bpf, fds: fds}
}

// idleOpen has the clients open n connections, idleBatch at a time, each
// batch spliced (the forwarder's descriptors back near base) before the
// next: pairs in control mode hold two descriptors each.
func (e *Env) idleOpen(ctx context.Context, cl *idleClients, pid int, base float64, n int) error {
	per := ceilDiv(n, len(cl.procs))
	for opened := 0; opened < n; {
		b := min(idleBatch, n-opened)
		h := cl.procs[(opened/per)%len(cl.procs)]
		b = min(b, (opened/per+1)*per-opened)
		if _, err := h.ask("open " + strconv.Itoa(b)); err != nil {
			return fmt.Errorf("after %d pairs: %w", opened, err)
		}
		opened += b
		deadline := time.Now().Add(60 * time.Second)
		for readIdleUse(pid).fds > base+16 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d pairs opened: the forwarder still holds %v descriptors (%v before the first) after 60 s", opened, readIdleUse(pid).fds, base)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// idleClients are the dialling helper processes.
type idleClients struct{ procs []*idleProc }

// idleProc is one helper process and its command pipe.
type idleProc struct {
	in  io.WriteCloser
	out *bufio.Scanner
	log string
}

// ask sends a command and returns the answer, an error if it says so.
func (p *idleProc) ask(cmd string) (string, error) {
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		return "", err
	}
	if !p.out.Scan() {
		return "", fmt.Errorf("helper ended (%v): %s", p.out.Err(), p.log)
	}
	l := p.out.Text()
	if strings.HasPrefix(l, "error ") {
		return "", fmt.Errorf("%s", strings.TrimPrefix(l, "error "))
	}
	return l, nil
}

// idleClients starts k diallers in the client namespace toward listen.
func (e *Env) idleClients(ctx context.Context, self, listen string, sources []netip.Addr, k int, pids *[]int) (*idleClients, error) {
	srcs := make([]string, len(sources))
	for i, s := range sources {
		srcs[i] = s.String()
	}
	cl := &idleClients{}
	for i := range k {
		cmd := e.Client.Command(ctx, self, IdleHelperCommand, "dial", listen, strings.Join(srcs, ","))
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		logPath := filepath.Join(e.dir, fmt.Sprintf("idle-client-%d.log", i))
		if f, err := os.Create(logPath); err == nil {
			cmd.Stderr = f
			defer f.Close()
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		*pids = append(*pids, cmd.Process.Pid)
		go cmd.Wait()
		cl.procs = append(cl.procs, &idleProc{in: in, out: bufio.NewScanner(out), log: logPath})
	}
	return cl, nil
}

// echo has every dialler check each of its connections, all at once,
// and sums what they say.
func (cl *idleClients) echo() (ok int, firstErr string, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range cl.procs {
		wg.Go(func() {
			l, aerr := p.ask("echo")
			var good, bad int
			var rest string
			if aerr == nil {
				_, aerr = fmt.Sscanf(l, "echoed %d %d", &good, &bad)
				if f := strings.Fields(l); len(f) > 3 {
					rest = strings.Join(f[3:], " ")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			ok += good
			if aerr != nil && err == nil {
				err = aerr
			}
			if rest != "" && firstErr == "" {
				firstErr = rest
			}
		})
	}
	wg.Wait()
	return ok, firstErr, err
}

// close ends the diallers' input: each resets its connections and exits.
func (cl *idleClients) close() {
	for _, p := range cl.procs {
		p.in.Close()
	}
}

// waitGone waits, 10 s at most, until the processes killed are gone:
// the next count's listen and origin ports are theirs until then.
func waitGone(pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

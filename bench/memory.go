// The memory experiment (seed 001 §V-C): bytes per pair held unspliced and spliced, in the process, the kernel and BPF maps.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MaxMemoryPairs is the largest pair count the memory experiment tries: the
// open-file limit (20000 here, not raisable without CAP_SYS_RESOURCE) must
// hold two sockets per pair in the forwarder, and the client and origin
// sockets in the bench process, so 10,000 pairs do not fit.
const MaxMemoryPairs = 9000

// memPort and memAdmin are where each memory measurement's own splicer
// listens, in the forwarder namespace.
const (
	memPort  = 7900
	memAdmin = "127.0.0.1:9902"
	// memPorts is the memory splicer's engines.ip.local_ports: room for
	// MaxMemoryPairs, apart from the default range.
	memPorts = "20000-31999"
	// heldFor keeps unspliced pairs in control mode for the whole measurement.
	heldFor = 24 * time.Hour
	// fdReserve is what a splicer process needs besides its pairs.
	fdReserve = 200
	// dialBatch is how many connections are opened before waiting for the
	// forwarder to have accepted them, well under the accept queue's length.
	dialBatch = 1000
)

var memModes = []string{"unspliced", "spliced"}

// memUse is one reading of the memory a set of pairs costs.
type memUse struct {
	rss    float64 // the forwarder processes' resident set
	kernel float64 // the process's files, sockets, pipes, epoll entries and socket buffers
	bpf    float64 // memlock of the BPF maps the forwarder holds
	fds    float64 // open files of the forwarder
}

func (a memUse) minus(b memUse) memUse {
	return memUse{rss: a.rss - b.rss, kernel: a.kernel - b.kernel, bpf: a.bpf - b.bpf, fds: a.fds - b.fds}
}

// Memory holds idle pairs through a fresh splicer process per engine, mode
// and count, unspliced (in control mode) and spliced, and reports the
// bytes each pair costs: the process's RSS, the kernel objects and socket
// buffers it holds, and BPF maps.
func Memory(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "memory"}
	for _, t := range e.Targets {
		if t.Peer {
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "memory per pair is measured for splicer's engines only"})
		} else if t.Unavailable != "" {
			res.Unavailable = append(res.Unavailable, Missing{t.Name, t.Unavailable})
		}
	}
	if e.Lab == nil {
		res.Notes = append(res.Notes, "memory needs the lab (root): not measured")
		return res, nil
	}
	var engines []*Target
	for _, t := range e.Available() {
		if !t.Peer {
			engines = append(engines, t)
		}
	}
	smp := newSamples()
	failed := map[string]bool{}
	fdsPerPair := map[string]float64{}
	pairsUsed := map[string]int{}
	p := newProgress(s.Progress, "memory", len(s.MemoryPairs)*s.Runs*2*len(engines))
	for ci, n := range s.MemoryPairs {
		suffix := ""
		if ci > 0 {
			suffix = "_max"
		}
		for run := 0; run < s.Runs; run++ {
			for _, t := range engines {
				for _, mode := range memModes {
					key := t.Name + "/" + mode
					count := n
					if ci > 0 {
						count = fitPairs(n, fdsPerPair[key])
					}
					p.step(fmt.Sprintf("run %d %s: %d pairs %s", run+1, t.Name, count, mode))
					if failed[key+suffix] {
						continue
					}
					d, err := e.memoryOf(ctx, t.Name, mode, count)
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					if err != nil {
						// One count or mode failing leaves the others standing.
						failed[key+suffix] = true
						res.Notes = append(res.Notes, fmt.Sprintf("%s, %d pairs %s: failed, no row: %v", t.Name, count, mode, err))
						continue
					}
					if ci == 0 {
						fdsPerPair[key] = d.fds / float64(count)
					}
					pairsUsed[key+suffix] = count
					c := float64(count)
					rss, kernel, bpf := d.rss/c, d.kernel/c, d.bpf/c
					smp.add(t.Name, "bytes_per_pair_"+mode+suffix, "B", rss+kernel+bpf)
					smp.add(t.Name, "rss_bytes_per_pair_"+mode+suffix, "B", rss)
					smp.add(t.Name, "kernel_bytes_per_pair_"+mode+suffix, "B", kernel)
					smp.add(t.Name, "bpf_bytes_per_pair_"+mode+suffix, "B", bpf)
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(names(engines))
	for i := range res.Rows {
		r := &res.Rows[i]
		mode, suffix := "unspliced", ""
		if strings.Contains(r.Metric, "_spliced") {
			mode = "spliced"
		}
		if strings.HasSuffix(r.Metric, "_max") {
			suffix = "_max"
		}
		r.Pairs = pairsUsed[r.Engine+"/"+mode+suffix]
	}
	res.Notes = append(res.Notes, memoryNotes(s, pairsUsed)...)
	return res, nil
}

// memoryNotes say how the numbers were taken and at which counts.
func memoryNotes(s Settings, pairsUsed map[string]int) []string {
	notes := []string{
		fmt.Sprintf("each cell: a fresh splicer process with one listener; idle pairs opened from the client namespace to the origin's sink, held unspliced (splice_after %v: control mode) or spliced; %d run(s), median (min–max)", heldFor, s.Runs),
		"bytes_per_pair = rss + kernel + bpf: rss is the process's VmRSS growth (no forced GC); kernel is accounted, not read machine-wide (other processes move that by megabytes): the growth of the objects the process's descriptors pin (struct file and dentry per descriptor, TCP sock and socket inode per socket, inode, pipe_inode_info and slot array per pipe, an entry per epoll registration) at their /proc/slabinfo object sizes, plus the socket buffers of the forwarder namespace's TCP sockets from sock_diag (ss -tm skmem); bpf is the growth of the memlock of the BPF maps the process holds (/proc/PID/fdinfo). Preallocated maps cost the same with 0 pairs, so their growth is 0",
	}
	if len(s.MemoryPairs) > 1 {
		var counts []string
		for k, n := range pairsUsed {
			if strings.HasSuffix(k, "_max") {
				counts = append(counts, fmt.Sprintf("%s %d", strings.TrimSuffix(k, "_max"), n))
			}
		}
		slices.Sort(counts)
		notes = append(notes, fmt.Sprintf("first columns at %d pairs; _max columns at the largest count that fits the open-file limit (%d here, hard, not raisable without CAP_SYS_RESOURCE), at most %d: 10,000 pairs need 20,000+ descriptors in the forwarder alone; counts used: %s",
			s.MemoryPairs[0], fileLimit(), s.MemoryPairs[len(s.MemoryPairs)-1], strings.Join(counts, ", ")))
	}
	return notes
}

// memoryOf starts a splicer with one listener for engine in mode, opens
// count idle pairs through it and returns what they added.
func (e *Env) memoryOf(ctx context.Context, engine, mode string, count int) (memUse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listen := net.JoinHostPort(e.addrs.fwd, strconv.Itoa(memPort))
	after := "0s"
	if mode == "unspliced" {
		after = heldFor.String()
	}
	// Its own port range: the bench's main splicer process, in the same
	// namespace, dials from the default one, and its pairs' TIME_WAITs
	// toward the same origin port are claims this process cannot see.
	cfg := fmt.Sprintf("admin: %q\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nengines: {ip: {local_ports: %s}}\nlisteners:\n"+
		"  - {name: mem, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s, splice_after: %s}\n",
		memAdmin, memPorts, listen, e.addrs.originAddr(Sink), engine, after)
	path := filepath.Join(e.dir, "memory.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return memUse{}, err
	}
	log, err := os.Create(filepath.Join(e.dir, "memory.log"))
	if err != nil {
		return memUse{}, err
	}
	defer log.Close()
	cmd := e.fwd.Command(ctx, e.splicer, "run", "--config", path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return memUse{}, err
	}
	defer func() { cancel(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if err := e.waitListening(listen); err != nil {
		return memUse{}, fmt.Errorf("splicer did not start: %v: %s", err, e.LogTail("memory"))
	}
	// The probe connection above must be gone from /flows before counting.
	if err := e.waitFlows(ctx, memAdmin, "", 0); err != nil {
		return memUse{}, err
	}
	settle()
	sizes := slabSizes()
	before, err := e.readMemUse(ctx, pid, sizes)
	if err != nil {
		return memUse{}, err
	}
	var conns []net.Conn
	defer func() { closeAll(conns) }()
	// In batches that the forwarder has taken before the next: a full
	// accept queue drops handshakes the client already counts as done.
	for len(conns) < count {
		batch, err := e.dialMany(ctx, listen, min(dialBatch, count-len(conns)))
		conns = append(conns, batch...)
		if err != nil {
			return memUse{}, err
		}
		if err := e.waitFlows(ctx, memAdmin, "", len(conns)); err != nil {
			return memUse{}, err
		}
	}
	want := "control"
	if mode == "spliced" {
		want = "spliced"
	}
	if err := e.waitFlows(ctx, memAdmin, want, count); err != nil {
		return memUse{}, err
	}
	settle()
	held, err := e.readMemUse(ctx, pid, sizes)
	return held.minus(before), err
}

// settle lets connections that just changed state finish their work and
// the allocators their bookkeeping before a reading.
func settle() { time.Sleep(300 * time.Millisecond) }

// dialMany opens count connections from the client namespace.
func (e *Env) dialMany(ctx context.Context, addr string, count int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, count)
	for range count {
		c, err := e.Dial(ctx, "tcp", addr)
		if err != nil {
			return conns, fmt.Errorf("dial %s after %d connections: %w", addr, len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// closeAll resets the connections, so that none lingers in TIME_WAIT and
// skews the next reading.
func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// waitFlows waits until the /flows of the splicer whose admin endpoint
// is admin lists exactly count pairs, all in state (any state when state
// is empty).
func (e *Env) waitFlows(ctx context.Context, admin, state string, count int) error {
	// The ip engine takes milliseconds per splice (it freezes the sockets
	// and probes the peers), so thousands of pairs take a while.
	limit := 60*time.Second + time.Duration(count)*30*time.Millisecond
	deadline := time.Now().Add(limit)
	var n int
	for {
		flows, err := e.flowsAt(ctx, admin)
		if err == nil {
			n = 0
			for _, f := range flows {
				if state == "" || f.State == state {
					n++
				}
			}
			if n == count && (state == "" || len(flows) == count) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %d pairs in state %q: %d after %v (last error %v)", count, state, n, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readMemUse reads the memory of the process tree rooted at pid and the
// socket buffers of the forwarder's namespace.
func (e *Env) readMemUse(ctx context.Context, pid int, sizes map[string]float64) (memUse, error) {
	var m memUse
	for _, p := range append([]int{pid}, descendants(pid)...) {
		m.rss += statusField(p, "VmRSS")
		bpf, fds := bpfMapMemory(p)
		m.bpf += bpf
		m.fds += fds
		m.kernel += countKernelObjects(p).bytes(sizes)
	}
	buffers, err := socketBuffers(ctx, e.fwd)
	m.kernel += buffers
	return m, err
}

// statusField returns a kB field of /proc/PID/status in bytes.
func statusField(pid int, field string) float64 {
	return kbField(fmt.Sprintf("/proc/%d/status", pid), field)
}

func kbField(path, field string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		v, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		return v * 1024
	}
	return 0
}

// bpfMapMemory sums the memlock of the BPF maps pid holds open, and counts
// its open files.
func bpfMapMemory(pid int) (bytes, fds float64) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, ent := range ents {
		fds++
		target, err := os.Readlink(filepath.Join(dir, ent.Name()))
		if err != nil || target != "anon_inode:bpf-map" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, ent.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				bytes += n
			}
		}
	}
	return bytes, fds
}

// fileLimit is this process's hard open-file limit, which the splicer
// processes it starts inherit.
func fileLimit() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(lim.Max, 1<<30))
}

// fitPairs is the largest multiple of 500 up to want whose pairs fit the
// open-file limit at fdsPerPair each (two sockets at least), in the
// forwarder and, for the client and origin ends, in this process.
func fitPairs(want int, fdsPerPair float64) int {
	per := max(fdsPerPair, 2)
	n := int(float64(fileLimit()-fdReserve) / per)
	n = min(n, want, (fileLimit()-fdReserve)/2)
	return max(500, n/500*500)
}

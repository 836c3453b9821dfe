// The iprate experiment: new pairs spliced by engine ip per second to one upstream, sustained past what the local port range carries without taking TIME_WAIT ports again.

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/loadgen"
)

const (
	ipratePort  = 7910
	iprateAdmin = "127.0.0.1:9910"
	// iprateLow starts the iprate splicer's engines.ip.local_ports,
	// apart from the main splicer's and memory's; iprateRange is its
	// size unless Settings.IPRatePorts says otherwise: the default's.
	iprateLow   = 32000
	iprateRange = 20000
	// iprateSize is what each connection sends and reads back.
	iprateSize = 64
	// iprateSources are the client addresses the clients connect from in
	// turn. The clients close first, so each of their ports sits in
	// TIME_WAIT for 60 s; one address gives the default 28,232 ephemeral
	// ports, about 470 new connections a second, so 16 carry about 7,500
	// without any port taken again: every pair a 4-tuple new to the
	// forwarder, as from many hosts.
	iprateSources = 16
)

// IPRate runs loadgen's connect/send/close (a connection per
// transaction, the client closing first) in a client process of its own
// in the client namespace, from iprateSources addresses in turn, through
// a fresh splicer process's tcp listener with engine ip (splice_after
// 0s: every pair spliced at once) to the origin's echo, for s.IPRateFor
// with s.IPRateConns clients. Every pair goes to one server (address and
// port), so past the range's 20,000 ports within the datapath's 60 s
// TIME_WAIT, about 330 pairs a second, it carries on only by taking
// ports of pairs in TIME_WAIT again. It reports pairs/s, the pairs ip
// spliced (its splice counters), fallbacks by reason, the picks refused
// and the ports taken again (engine counters), the descriptors the
// process held at most, and its CPU, the client's and the origin's per
// pair.
func IPRate(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "iprate"}
	if e.Lab == nil {
		res.Notes = append(res.Notes, "iprate needs the lab (root): not measured")
		return res, nil
	}
	smp := newSamples()
	// One run: two minutes of churn leave a minute of TIME_WAIT behind,
	// which a next run in the same lab would meet (--runs does not apply).
	const runs = 1
	p := newProgress(s.Progress, "iprate", runs)
	for run := 0; run < runs; run++ {
		p.step(fmt.Sprintf("run %d: %d clients for %v", run+1, s.IPRateConns, s.IPRateFor))
		m, err := e.iprateRun(ctx, s.IPRateFor, s.IPRateConns, ipratePorts(s))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			res.Unavailable = append(res.Unavailable, Missing{"ip", failedInRun(run, err)})
			break
		}
		m.add(smp)
		res.Notes = append(res.Notes, m.note(run))
	}
	p.finish()
	res.Rows = smp.rows([]string{"ip"})
	res.Notes = append(res.Notes, fmt.Sprintf("each run: a fresh splicer process, tcp listener with engine ip (splice_after 0s, engines.ip.local_ports %s, time_wait 60s), loadgen connect/send/close of %d bytes from %d clients in a process of their own in the client namespace, connecting from %d addresses in turn (lab.AddClientAddrs; the port chosen at connect, IP_BIND_ADDRESS_NO_PORT), to the origin's echo for %v; pairs_per_s: transactions completed per second; spliced_per_s: ip's splices (splicer_splice_transitions_total, fallbacks left out) per second; fallbacks: splicer_fallbacks_total; local_ports_exhausted: picks with every range port busy (the dial took a kernel port); local_ports_reused: ports of pairs in the datapath's TIME_WAIT taken again; fds_max: the process's descriptors at most, sampled every second; cpu_us_per_pair: the process's CPU time per pair; client_cpu_us_per_pair: the client process's (its getrusage), origin_cpu_us_per_pair: the bench process's, where the origin runs (kernel work is charged to whichever process's system call or softirq ran it: a client's send carries its segment through the forwarder's datapath to the origin's socket); one run (--runs does not apply)", ipratePorts(s), iprateSize, s.IPRateConns, iprateSources, s.IPRateFor))
	return res, nil
}

// ipratePorts is the iprate splicer's engines.ip.local_ports.
func ipratePorts(s Settings) string {
	n := s.IPRatePorts
	if n <= 0 {
		n = iprateRange
	}
	return fmt.Sprintf("%d-%d", iprateLow, iprateLow+min(n, 65535-iprateLow)-1)
}

// iprateMeasure is one run's readings.
type iprateMeasure struct {
	r         loadgen.ConnectResult
	spliced   float64
	fallbacks map[string]float64 // by "from>to reason"
	// events are engine ip's other counters that moved (drops by
	// reason, reopened tuples, unsplices...), closed the pairs closed
	// for a reason other than eof: together they say why clients
	// failed.
	events, closed map[string]float64
	exhausted      float64
	reused         float64
	fdsMax         int
	cpu            time.Duration
	// clientCPU is the client process's; originCPU is the bench
	// process's, where the origin runs.
	clientCPU, originCPU time.Duration
}

func (m iprateMeasure) add(smp *samples) {
	sec := m.r.Elapsed.Seconds()
	smp.add("ip", "pairs_per_s", "1/s", m.r.CPS)
	smp.add("ip", "spliced_per_s", "1/s", m.spliced/sec)
	var fb float64
	for _, v := range m.fallbacks {
		fb += v
	}
	smp.add("ip", "fallbacks", "pairs", fb)
	smp.add("ip", "local_ports_exhausted", "picks", m.exhausted)
	smp.add("ip", "local_ports_reused", "ports", m.reused)
	smp.add("ip", "errors", "pairs", float64(m.r.Errors))
	smp.add("ip", "fds_max", "fds", float64(m.fdsMax))
	if m.r.Conns > 0 {
		smp.add("ip", "cpu_us_per_pair", "µs", float64(m.cpu.Microseconds())/float64(m.r.Conns))
		smp.add("ip", "client_cpu_us_per_pair", "µs", float64(m.clientCPU.Microseconds())/float64(m.r.Conns))
		smp.add("ip", "origin_cpu_us_per_pair", "µs", float64(m.originCPU.Microseconds())/float64(m.r.Conns))
	}
}

// note says what one run counted, fallbacks by reason included.
func (m iprateMeasure) note(run int) string {
	var fb []string
	for k, v := range m.fallbacks {
		fb = append(fb, fmt.Sprintf("%s %.0f", k, v))
	}
	sort.Strings(fb)
	if len(fb) == 0 {
		fb = []string{"none"}
	}
	why := ""
	if len(m.closed) > 0 {
		why += "; pairs closed other than by eof: " + countList(m.closed)
	}
	if len(m.events) > 0 {
		why += "; engine ip events: " + countList(m.events)
	}
	if m.r.FirstErr != nil {
		why += "; first error: " + m.r.FirstErr.Error()
	}
	return fmt.Sprintf("run %d: %d pairs in %.1fs (%.0f/s), %.0f spliced by ip, fallbacks: %s, local_ports_exhausted %.0f, local_ports_reused %.0f, errors %d, p50 %v, p99 %v, at most %d descriptors, process CPU %v (%.0f%% of one CPU), clients' CPU %v (%.0f%%), origin's %v (%.0f%%)%s",
		run+1, m.r.Conns, m.r.Elapsed.Seconds(), m.r.CPS, m.spliced, strings.Join(fb, ", "), m.exhausted, m.reused, m.r.Errors,
		m.r.P50.Round(time.Microsecond), m.r.P99.Round(time.Microsecond), m.fdsMax, m.cpu.Round(time.Millisecond),
		100*m.cpu.Seconds()/m.r.Elapsed.Seconds(),
		m.clientCPU.Round(time.Millisecond), 100*m.clientCPU.Seconds()/m.r.Elapsed.Seconds(),
		m.originCPU.Round(time.Millisecond), 100*m.originCPU.Seconds()/m.r.Elapsed.Seconds(), why)
}

// countList is "k v, ..." of m, sorted by key.
func countList(m map[string]float64) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %.0f", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// iprateRun starts the iprate splicer, runs the load through it and reads
// what its counters moved.
func (e *Env) iprateRun(ctx context.Context, dur time.Duration, conns int, ports string) (iprateMeasure, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sources, err := e.iprateSources()
	if err != nil {
		return iprateMeasure{}, err
	}
	listen := net.JoinHostPort(e.addrs.fwd, strconv.Itoa(ipratePort))
	cfg := fmt.Sprintf("admin: %q\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nengines: {ip: {local_ports: %s}}\nlisteners:\n"+
		"  - {name: iprate, listen: %q, upstream: [%q], engine: ip, max_connections: 0, splice_after: 0s}\n",
		iprateAdmin, ports, listen, e.addrs.originAddr(Echo))
	path := filepath.Join(e.dir, "iprate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return iprateMeasure{}, err
	}
	log, err := os.Create(filepath.Join(e.dir, "iprate.log"))
	if err != nil {
		return iprateMeasure{}, err
	}
	defer log.Close()
	cmd := e.fwd.Command(ctx, e.splicer, "run", "--config", path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return iprateMeasure{}, err
	}
	defer func() { cancel(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if err := e.waitListening(listen); err != nil {
		return iprateMeasure{}, fmt.Errorf("splicer did not start: %v: %s", err, e.LogTail("iprate"))
	}
	before, err := e.scrapeAt(ctx, iprateAdmin)
	if err != nil {
		return iprateMeasure{}, err
	}
	cpu0, self0 := procCPU(pid), procCPU(os.Getpid())
	fdsMax := make(chan int, 1)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() { fdsMax <- sampleFDs(sampleCtx, pid) }()
	rep, err := e.iprateClients(ctx, listen, conns, dur, sources)
	stopSampling()
	m := iprateMeasure{r: rep.result(), fdsMax: <-fdsMax, cpu: procCPU(pid) - cpu0,
		clientCPU: rep.UserCPU + rep.SystemCPU, originCPU: procCPU(os.Getpid()) - self0}
	if err != nil {
		return m, err
	}
	after, err := e.scrapeAt(ctx, iprateAdmin)
	if err != nil {
		return m, err
	}
	m.read(before, after)
	return m, nil
}

// iprateSources are the client's address and iprateSources-1 more.
func (e *Env) iprateSources() ([]string, error) {
	extra, err := e.Lab.AddClientAddrs(iprateSources - 1)
	if err != nil {
		return nil, err
	}
	out := []string{e.Lab.Cfg.Client.Addr().String()}
	for _, a := range extra {
		out = append(out, a.String())
	}
	return out, nil
}

// iprateClients runs the clients in a process of their own in the client
// namespace (IPRateClient) and returns its report.
func (e *Env) iprateClients(ctx context.Context, listen string, conns int, dur time.Duration, sources []string) (iprateReport, error) {
	var rep iprateReport
	self, err := os.Executable()
	if err != nil {
		return rep, err
	}
	cmd := e.Client.Command(ctx, self, IPRateClientCommand, listen, strconv.Itoa(iprateSize), strconv.Itoa(conns), dur.String(), strings.Join(sources, ","))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return rep, fmt.Errorf("iprate client: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("iprate client: %v: %q", err, out)
	}
	return rep, nil
}

// read fills m from two scrapes of the splicer's /metrics.
func (m *iprateMeasure) read(before, after map[string]float64) {
	m.fallbacks = map[string]float64{}
	m.events, m.closed = map[string]float64{}, map[string]float64{}
	eachGrowth(before, after, func(name string, l map[string]string, d float64) {
		switch {
		case name == "splicer_splice_transitions_total" && l["engine"] == "ip" && l["outcome"] != "fallback":
			m.spliced += d
		case name == "splicer_fallbacks_total":
			m.fallbacks[l["from"]+">"+l["to"]+" "+l["reason"]] += d
		case name == "splicer_engine_events_total" && l["engine"] == "ip" && l["event"] == "local_ports_exhausted":
			m.exhausted += d
		case name == "splicer_engine_events_total" && l["engine"] == "ip" && l["event"] == "local_ports_reused":
			m.reused += d
		case name == "splicer_engine_events_total" && l["engine"] == "ip" && !iprateRoutine[l["event"]]:
			m.events[l["event"]] += d
		case name == "splicer_connections_closed_total" && l["reason"] != "eof":
			m.closed[l["reason"]] += d
		}
	})
}

// iprateRoutine are the engine ip counters left out of the run's note
// (iprateMeasure.events): those every pair moves, and gauges, whose
// difference says nothing.
var iprateRoutine = map[string]bool{"forwarded": true, "clocks_read": true, "clock_probes": true,
	"graces_watched": true, "graces_visited": true, "local_ports_leased": true, "local_ports_held": true,
	"local_ports_unreserved": true, "port_hold_descriptors": true}

// eachGrowth calls fn with every sample of two scrapes of /metrics
// (scrapeAt) that grew from before to after: its name, labels and growth.
func eachGrowth(before, after map[string]float64, fn func(name string, labels map[string]string, d float64)) {
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			name, labels, _ := strings.Cut(k, "{")
			fn(name, parseLabels(strings.TrimSuffix(labels, "}")), d)
		}
	}
}

// parseLabels reads a="x",b="y".
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// scrapeAt reads every sample of the /metrics at admin addr, by its name
// and labels as written.
func (e *Env) scrapeAt(ctx context.Context, addr string) (map[string]float64, error) {
	out := map[string]float64{}
	err := e.metricLines(ctx, addr, func(line string) bool {
		if strings.HasPrefix(line, "#") {
			return true
		}
		if i := strings.LastIndexByte(line, ' '); i >= 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				out[line[:i]] = v
			}
		}
		return true
	})
	return out, err
}

// sampleFDs counts pid's open descriptors every second until ctx ends
// and returns the most seen.
func sampleFDs(ctx context.Context, pid int) int {
	most := 0
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			most = max(most, len(ents))
		}
		select {
		case <-ctx.Done():
			return most
		case <-t.C:
		}
	}
}

// splicer bench: the papers' experiments against every engine and peer, as Markdown tables, JSON and plots.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/origin"
)

const benchUsage = `Usage: splicer bench [options] EXPERIMENT...
       splicer bench EXPERIMENT... [options]

Reproduces the papers' experiments in a three-namespace lab (root): the
built-in origin in the server namespace, one splicer process with a listener
per engine (copy, pipe, sockmap, ip) and service, plus per engine an
http-forward proxy (web) and an http-reverse switch (switch), and the peers
(route: plain kernel routing; haproxy; haproxy-splice: HAProxy with option
splice-auto; both also in HTTP mode for switch; socat) in the forwarder
namespace, load generators in the client namespace. Engines and
peers that cannot run here show as n/a with the reason. Without root it runs
on loopback with the engines that need no privileges.

Experiments:
%s  all          every experiment above, in this order

Method: every measurement is repeated --runs times with the targets
interleaved (A B C A B C ...); cells are the median with the min–max range.
CPU is every CPU's busy time from /proc/stat (user, system, irq, softirq), so
kernel forwarding that runs in softirq outside any process is counted; the
forwarder processes' own time is reported beside it (proc_*). The load
generator and the origin share the machine. See docs/benchmarks.md.

Output: Markdown tables on stdout, a progress line on stderr.
  --json FILE  one experiment: {"experiment": NAME, "rows": [{"engine", "metric",
               "value" (median), "min", "max", "unit", "runs"}, ...],
               "unavailable": [{"engine", "reason"}], "notes": [...],
               "traces": [...]}; several (or all): a JSON array of such objects.
  --plot DIR   PNG plots of the experiments run (DIR is created).
  --from FILE  measure nothing: print the tables and headline of an earlier
               --json FILE (and its plots with --plot).

Options:
`

func benchCmd(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	runs := fs.Int("runs", 0, "repetitions of every measurement (default 5; 1 with --quick)")
	dur := fs.Duration("duration", 0, "measured window of each bulk and request/response run, half of it per object size in web and switch (default 2s; 250ms with --quick)")
	pairs := fs.Int("pairs", 0, "idle pairs splice-cost splices per engine (default 1000; 200 with --quick)")
	iprateFor := fs.Duration("iprate-for", 0, "how long iprate opens pairs (default 2m; 5s with --quick)")
	iprateConns := fs.Int("iprate-conns", 0, "iprate's concurrent clients (default 64; 16 with --quick)")
	iprateRange := fs.Int("iprate-ports", 0, "ports of iprate's engines.ip.local_ports (default 20000): fewer take TIME_WAIT ports again at a lower rate")
	idlePairs := fs.String("idle-pairs", "", "pair counts idle holds at once, comma-separated (default 10000,100000; 2000 with --quick)")
	switchSizes := fs.String("switch-sizes", "", "object sizes switch and web's wrk rows fetch, comma-separated (e.g. 1KiB,64KiB,1MiB; default 1KiB,10KiB,64KiB,100KiB,1MiB,8MiB)")
	crossoverSizes := fs.String("crossover-sizes", "", "transfer sizes crossover measures, comma-separated (default 1KiB,4KiB,16KiB,64KiB,128KiB,256KiB,512KiB,1MiB,2MiB,4MiB,16MiB; 1KiB,64KiB,1MiB,16MiB with --quick)")
	cc := fs.String("cc", "", "TCP congestion control of the lab's namespaces, e.g. cubic (default: the host's net.ipv4.tcp_congestion_control); every experiment's notes name it")
	pin := fs.Bool("pin", false, "web's wrk rows: wrk and the origin on half the CPUs, every forwarder on the other half (default: only wrk pinned, to the last CPU)")
	warmup := fs.Duration("warmup", 0, "unmeasured wrk run before each measured point of web's wrk rows, at the same target and size; 0s: none (default 500ms; none with --quick)")
	quick := fs.Bool("quick", false, "one short run of everything: a smoke test: all in under 90s; numbers are not for reading")
	jsonOut := fs.String("json", "", "write the results as JSON to `FILE`")
	plotDir := fs.String("plot", "", "write PNG plots to `DIR`")
	loopback := fs.Bool("loopback", false, "run on loopback without the lab even as root")
	from := fs.String("from", "", "run nothing: print the tables (and --plot) of an earlier --json `FILE`")
	fs.Usage = func() {
		var list strings.Builder
		for _, x := range bench.Experiments {
			fmt.Fprintf(&list, "  %-12s %s\n", x.Name, x.Help)
		}
		fmt.Fprintf(os.Stderr, benchUsage, list.String())
		fs.PrintDefaults()
	}
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *from != "" {
		return renderSaved(*from, *plotDir)
	}
	if len(names) == 0 {
		fs.Usage()
		return errors.New("bench: name an experiment, or all")
	}
	exps, err := selectExperiments(names)
	if err != nil {
		fs.Usage()
		return err
	}
	s := bench.DefaultSettings()
	if *quick {
		s = bench.QuickSettings()
	}
	if *runs > 0 {
		s.Runs = *runs
	}
	if *dur > 0 {
		s.Duration = *dur
	}
	if *pairs > 0 {
		s.Pairs = *pairs
	}
	if *iprateFor > 0 {
		s.IPRateFor = *iprateFor
	}
	if *iprateConns > 0 {
		s.IPRateConns = *iprateConns
	}
	if *iprateRange > 0 {
		s.IPRatePorts = *iprateRange
	}
	if *idlePairs != "" {
		s.IdlePairs = nil
		for _, f := range strings.Split(*idlePairs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("--idle-pairs: %q is not a pair count", f)
			}
			s.IdlePairs = append(s.IdlePairs, n)
		}
	}
	if *switchSizes != "" {
		s.SwitchSizes = nil
		for _, f := range strings.Split(*switchSizes, ",") {
			n, err := origin.ParseSize(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("--switch-sizes: %w", err)
			}
			s.SwitchSizes = append(s.SwitchSizes, n)
		}
	}
	if *crossoverSizes != "" {
		s.CrossoverSizes = nil
		for _, f := range strings.Split(*crossoverSizes, ",") {
			n, err := origin.ParseSize(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("--crossover-sizes: %w", err)
			}
			s.CrossoverSizes = append(s.CrossoverSizes, n)
		}
	}
	if flagSet(fs, "warmup") {
		if *warmup < 0 {
			return fmt.Errorf("--warmup %v: must be 0s (none) or more", *warmup)
		}
		s.Warmup = *warmup
	}
	s.Pin = *pin
	s.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	fmt.Fprintln(os.Stderr, "building the lab and starting origin, splicer and peers...")
	env, err := bench.New(bench.Options{Loopback: *loopback, Pin: *pin, CC: *cc})
	if err != nil {
		return err
	}
	defer env.Close()
	for _, sk := range env.Skipped {
		fmt.Fprintln(os.Stderr, "skipped:", sk)
	}

	fmt.Printf("## splicer bench %s\n\n%s, `splicer bench %s`, %d CPUs, %d run(s) of %v per measurement.\n\n",
		strings.Join(names, " "), start.UTC().Format("2006-01-02 15:04 MST"), strings.Join(args, " "), runtimeCPUs(), s.Runs, s.Duration)
	var results []*bench.Result
	for _, x := range exps {
		r, err := runExperiment(ctx, env, x, s)
		if err != nil {
			return fmt.Errorf("%s: %w", x.Name, err)
		}
		bench.WriteMarkdown(os.Stdout, r)
		results = append(results, r)
	}
	bench.WriteHeadline(os.Stdout, results)
	if *jsonOut != "" {
		if err := writeOutput(*jsonOut, func(w io.Writer) error { return bench.WriteJSON(w, results) }); err != nil {
			return err
		}
	}
	if err := writePlots(*plotDir, results); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench took %.1fs\n", time.Since(start).Seconds())
	return nil
}

// writePlots writes the plots to dir, if one was given.
func writePlots(dir string, results []*bench.Result) error {
	if dir == "" {
		return nil
	}
	files, err := bench.WritePlots(dir, results)
	for _, f := range files {
		fmt.Fprintln(os.Stderr, "wrote", f)
	}
	return err
}

// renderSaved prints the tables of a --json file and optionally its plots.
func renderSaved(path, plotDir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var results []*bench.Result
	if err := json.Unmarshal(b, &results); err != nil {
		var one bench.Result
		if err1 := json.Unmarshal(b, &one); err1 != nil {
			return fmt.Errorf("%s: not bench JSON: %w", path, err)
		}
		results = []*bench.Result{&one}
	}
	for _, r := range results {
		bench.WriteMarkdown(os.Stdout, r)
	}
	bench.WriteHeadline(os.Stdout, results)
	return writePlots(plotDir, results)
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseInterleaved accepts flags before and after the experiment names.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return names, nil
}

// selectExperiments resolves names, expanding all.
func selectExperiments(names []string) ([]bench.Experiment, error) {
	var out []bench.Experiment
	for _, n := range names {
		if n == "all" {
			return bench.Experiments, nil
		}
		x, ok := bench.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("bench: unknown experiment %q", n)
		}
		out = append(out, x)
	}
	return out, nil
}

// runExperiment runs x, or reports what it waits for.
func runExperiment(ctx context.Context, env *bench.Env, x bench.Experiment, s bench.Settings) (*bench.Result, error) {
	if x.Pending != "" {
		fmt.Fprintf(os.Stderr, "%s: %s\n", x.Name, x.Pending)
		return &bench.Result{Experiment: x.Name, Pending: x.Pending}, nil
	}
	return bench.RunExperiment(ctx, env, x, s)
}

// writeOutput writes through fn to path, or to stdout for "-".
func writeOutput(path string, fn func(io.Writer) error) error {
	if path == "-" {
		return fn(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

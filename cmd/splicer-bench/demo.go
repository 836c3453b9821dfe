// splicer demo: the embedded default run. Builds a lab, an origin and traffic, runs every engine and peer, prints a table.

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/splicer/splicer/bench"
)

func demoCmd(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	bulk := fs.Duration("bulk", 2*time.Second, "length of each bulk transfer")
	rr := fs.Duration("rr", time.Second, fmt.Sprintf("1-byte request/response time per target, split into %d runs interleaved across the targets", bench.DemoRRRounds))
	loopback := fs.Bool("loopback", false, "run on loopback without the lab even as root")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer demo [options]

Builds a three-namespace lab (client 10.99.1.2, forwarder 10.99.1.1/10.99.2.1,
server 10.99.2.2), starts a built-in origin in the server namespace and one
splicer process with a listener per engine in the forwarder namespace, plus
HAProxy, HAProxy with splice, socat and plain kernel routing for comparison.
Pushes a bulk transfer through each, then 1-byte request/response in three
rounds through every target in turn, and prints a table (txn/s: the median
of the three), then tears everything down (also on Ctrl-C).
Without root it runs on loopback with the engines that need no privileges and
says what it skipped.

Options:
`)
		fs.PrintDefaults()
	}
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	fmt.Fprintln(os.Stderr, "building the lab and starting origin, splicer and peers...")
	env, err := bench.New(bench.Options{Loopback: *loopback})
	if err != nil {
		return err
	}
	defer env.Close()
	for _, s := range env.Skipped {
		fmt.Fprintln(os.Stderr, "skipped:", s)
	}
	rows, err := env.Demo(ctx, *bulk, *rr, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Println()
	bench.WriteDemoTable(os.Stdout, rows)
	fmt.Printf("\nforwarder CPU: the forwarding processes' user+system time; machine CPU: all CPUs' busy time incl. softirq,\n"+
		"load generator and origin included (same work for every row). 1-byte txn/s: one connection, the median of\n"+
		"%d runs interleaved across the targets. %d CPUs. Took %.1fs.\n", bench.DemoRRRounds, runtimeCPUs(), time.Since(start).Seconds())
	return nil
}

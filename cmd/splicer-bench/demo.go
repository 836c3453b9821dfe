// splicer demo: the embedded default run. Builds a lab, an origin and traffic, runs every engine and peer through iperf3, sockperf and the load generator, prints a table.

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
	bulk := fs.Duration("bulk", time.Second, "length of each load-generator bulk transfer")
	rr := fs.Duration("rr", time.Second, fmt.Sprintf("load-generator 1-byte request/response time per target, split into %d runs interleaved across the targets", bench.DemoRRRounds))
	tools := fs.Duration("tools", 500*time.Millisecond, "least measured time of each iperf3 and sockperf run (whole seconds of -t; sockperf adds its warm-up)")
	loopback := fs.Bool("loopback", false, "run on loopback without the lab even as root")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer demo [options]

Builds a three-namespace lab (client 10.99.1.2, forwarder 10.99.1.1/10.99.2.1,
server 10.99.2.2), starts a built-in origin in the server namespace and one
splicer process with a listener per engine in the forwarder namespace, plus
HAProxy, HAProxy with splice, socat and plain kernel routing for comparison.
Measures each with the field's tools, iperf3 (bulk, one stream) and sockperf
(ping-pong round trips of small messages), and with splicer's Go load
generator beside them (a bulk transfer, then 1-byte request/response in
three rounds through every target in turn), prints a table, then tears
everything down (also on Ctrl-C).
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
	table, err := env.Demo(ctx, bench.DemoSettings{Bulk: *bulk, RR: *rr, Tools: *tools, Progress: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Println()
	table.WriteTable(os.Stdout)
	fmt.Println()
	table.WriteNotes(os.Stdout)
	fmt.Printf("%d CPUs. Took %.1fs.\n", runtimeCPUs(), time.Since(start).Seconds())
	return nil
}

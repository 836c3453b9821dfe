// Command splicer-bench runs the demo and the benchmarks: a lab of network namespaces, the splicer daemon beside it, peers (HAProxy, nginx, socat, kernel routing) and load generators.
//
// It is a binary of its own so that the daemon links none of the lab, load
// generation or plotting code. It runs the splicer binary found beside it.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/internal/buildinfo"
	"github.com/splicer/splicer/internal/fdlimit"
)

const usage = `splicer-bench: the demo and the benchmarks of splicer.

Usage:
  splicer-bench demo [options]            build a lab, push traffic through every engine and peer, print a table
  splicer-bench bench [options] EXPERIMENT...   the experiments (see 'splicer-bench bench -h')
  splicer-bench version

'splicer demo' and 'splicer bench' run these. Both need root for the lab;
the splicer binary is taken from beside this one.
`

// errSilent ends a command whose problem was already printed.
var errSilent = errors.New("")

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fdlimit.Raise()
	var err error
	switch cmd {
	case "demo":
		err = demoCmd(args)
	case "bench":
		err = benchCmd(args)
	case bench.IdleHelperCommand:
		// A process of the idle experiment (bench/idlehelper.go), not for users.
		err = bench.IdleHelper(args, os.Stdin, os.Stdout)
	case bench.IPRateClientCommand:
		// The clients of the iprate experiment (bench/iprateclient.go), not for users.
		err = bench.IPRateClient(args, os.Stdout)
	case "version", "--version":
		fmt.Println("splicer-bench", buildinfo.Get().Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "splicer-bench: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if err != errSilent {
			fmt.Fprintln(os.Stderr, "splicer-bench:", err)
		}
		os.Exit(1)
	}
}

// runtimeCPUs is the number of CPUs this process may use.
func runtimeCPUs() int { return runtime.NumCPU() }

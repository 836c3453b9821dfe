// Command splicer is a Linux TCP forwarder that takes the proxy out of the data path by splicing connection pairs.
package main

import (
	"fmt"
	"os"

	"github.com/splicer/splicer/internal/buildinfo"
	"github.com/splicer/splicer/internal/fdlimit"
)

const usage = `splicer: a TCP forwarder and proxy (L4, SOCKS5, HTTP forward and reverse)
that hands each connection pair to the kernel once only forwarding is left.

Each listener's proxy reads what it must (a SOCKS or HTTP request, a route),
connects the upstream, then an engine forwards without the proxy copying:
  copy     read()/write() through a user-space buffer (runs everywhere)
  pipe     splice(2) through a kernel pipe (runs everywhere)
  sockmap  BPF sockhash: the kernel moves data between the sockets (root)
  ip       BPF at tc rewrites TCP headers; no TCP runs on the forwarder (root)
  auto     the best engine this host allows, falling back when one declines

Usage:
  splicer run --config FILE      run the forwarder (SIGHUP reloads, SIGUSR2 upgrades)
  splicer check FILE...          validate configurations, report every error with its line
  splicer reload --admin ADDR    re-read a running daemon's configuration (or --config, --pid-file)
  splicer upgrade --admin ADDR   replace a running daemon's binary without refusing a connection
  splicer upstreams --admin ADDR the back-end servers and their state; --drain or --ready one
  splicer hash-password          hash a socks5 user's password (read from stdin) for the configuration
  splicer completion bash|zsh    print a shell completion script
  splicer version                print the version (also --version)
  splicer help COMMAND           a command's options (also COMMAND -h)

  splicer demo, splicer bench    run splicer-bench (installed beside splicer): a lab demo,
                                 and the benchmarks against HAProxy, nginx and kernel routing

Examples: /etc/splicer/ or examples/ in the source (quickstart.yaml runs without root).
`

// commands maps each subcommand to its function (filled in init: the
// completion command lists them).
var commands map[string]func([]string) error

func init() {
	commands = map[string]func([]string) error{
		"run":           runCmd,
		"check":         checkCmd,
		"reload":        reloadCmd,
		"upgrade":       upgradeCmd,
		"upstreams":     upstreamsCmd,
		"hash-password": hashPasswordCmd,
		"completion":    completionCmd,
		"schema":        schemaCmd,
		"demo":          func(args []string) error { return benchBinary("demo", args) },
		"bench":         func(args []string) error { return benchBinary("bench", args) },
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fdlimit.Raise()
	var err error
	switch cmd {
	case "version", "--version", "-version":
		bi := buildinfo.Get()
		fmt.Printf("splicer %s (revision %s, %s)\n", bi.Version, bi.Revision, bi.GoVersion)
	case "help", "-h", "--help":
		if len(args) == 1 && commands[args[0]] != nil {
			err = commands[args[0]]([]string{"-h"})
			break
		}
		fmt.Print(usage)
	default:
		fn := commands[cmd]
		if fn == nil {
			fmt.Fprintf(os.Stderr, "splicer: unknown command %q\n\n%s", cmd, usage)
			os.Exit(2)
		}
		err = fn(args)
	}
	if err != nil {
		if err != errSilent {
			fmt.Fprintln(os.Stderr, "splicer:", err)
		}
		os.Exit(1)
	}
}

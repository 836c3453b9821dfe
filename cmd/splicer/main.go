// Command splicer is a Linux TCP forwarder that takes the proxy out of the data path by splicing connection pairs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"

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
	fdlimit.Raise()
	os.Exit(run(env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv}, os.Args[1:]))
}

// env is what a command sees of its process: where it writes, and the
// environment it reads.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
}

// cur is the env of the command that runs (run sets it; runMu makes
// one command run at a time in a test).
var (
	cur   env
	runMu sync.Mutex
)

// getenv is a variable of the command's environment, "" if unset.
func getenv(k string) string {
	v, _ := cur.getenv(k)
	return v
}

// errUsage and errHelp end a command whose flags were wrong (exit 2)
// or that was asked for its help (exit 0), once it printed so.
var (
	errUsage = errors.New("usage")
	errHelp  = errors.New("help")
)

// parse parses args into fs, printing to the command's stderr.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(cur.stderr)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	case err != nil:
		return errUsage
	}
	return nil
}

// run runs the command args name with e, and returns its exit code.
func run(e env, args []string) int {
	runMu.Lock()
	defer runMu.Unlock()
	cur = e
	if len(args) < 1 {
		fmt.Fprint(e.stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "version", "--version", "-version":
		bi := buildinfo.Get()
		fmt.Fprintf(e.stdout, "splicer %s (revision %s, %s)\n", bi.Version, bi.Revision, bi.GoVersion)
	case "help", "-h", "--help":
		if len(args) == 1 && commands[args[0]] != nil {
			err = commands[args[0]]([]string{"-h"})
			break
		}
		fmt.Fprint(e.stdout, usage)
	default:
		fn := commands[cmd]
		if fn == nil {
			fmt.Fprintf(e.stderr, "splicer: unknown command %q\n\n%s", cmd, usage)
			return 2
		}
		err = fn(args)
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err != errSilent:
		fmt.Fprintln(e.stderr, "splicer:", err)
	}
	return 1
}

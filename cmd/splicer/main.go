// Command splicer is a Linux TCP forwarder that takes the proxy out of the data path by splicing connection pairs.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

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
  splicer schema                 print a JSON Schema of the configuration file, for editors
  splicer completion SHELL       print a completion script for bash, zsh or fish
  splicer version                print the version (also --version)
  splicer help COMMAND           a command's options (also COMMAND --help)

  splicer demo, splicer bench    run splicer-bench (installed beside splicer): a lab demo,
                                 and the benchmarks against HAProxy, nginx and kernel routing

Examples: /etc/splicer/ or examples/ in the source (quickstart.yaml runs without root).
`

// helpTemplate is every command's help and usage: its text, then its
// options.
const helpTemplate = `{{.Long}}{{if .HasAvailableLocalFlags}}
Options:
{{.LocalFlags.FlagUsages}}{{end}}`

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

// errUsage ends a command that was called wrong (exit 2) once it printed
// its usage.
var errUsage = errors.New("usage")

// usageError is a command line cmd cannot take: run prints it and cmd's
// usage, and exits 2.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (u *usageError) Error() string { return u.err.Error() }

// printUsage prints c's usage to stderr (cobra's Usage writes where its
// help goes, to stdout) and returns errSilent: the command's arguments
// were missing or extra.
func printUsage(c *cobra.Command) error {
	fmt.Fprint(cur.stderr, c.UsageString())
	return errSilent
}

// newRoot builds the command tree; each run builds its own, so flags
// start from their defaults and read the env run was given.
func newRoot() *cobra.Command {
	bi := buildinfo.Get()
	root := &cobra.Command{
		Use: "splicer", Long: usage, SilenceErrors: true, SilenceUsage: true,
		Version: fmt.Sprintf("%s (revision %s, %s)", bi.Version, bi.Revision, bi.GoVersion),
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(c, args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error { printUsage(c); return errUsage },
	}
	root.SetHelpTemplate(helpTemplate)
	root.SetUsageTemplate(helpTemplate)
	root.SetVersionTemplate("splicer {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if a := c.Flags().Args(); c == root && len(a) > 0 {
			return unknownCommand(root, a[0]) // what was meant for a command it lacks
		}
		return &usageError{c, err}
	})
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(runCommand(), checkCommand(), controlCommand(reloadCtl), controlCommand(upgradeCtl),
		upstreamsCommand(), hashPasswordCommand(), schemaCommand(), completionCommand(),
		benchCommand("demo", "build a lab and push traffic through every engine and peer"),
		benchCommand("bench", "the benchmarks against HAProxy, nginx and kernel routing"),
		&cobra.Command{Use: "version", Short: "print the version", Args: cobra.NoArgs,
			Run: func(c *cobra.Command, _ []string) { fmt.Fprintln(cur.stdout, "splicer", root.Version) }})
	root.SetHelpCommand(helpCommand(root))
	return root
}

// unknownCommand is the usage error for a command name root lacks,
// with the names it was perhaps meant to be.
func unknownCommand(root *cobra.Command, name string) error {
	root.SuggestionsMinimumDistance = 2
	msg := fmt.Sprintf("unknown command %q", name)
	if s := root.SuggestionsFor(name); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return &usageError{root, errors.New(msg)}
}

// longFlags rewrites the single-dash long flags splicer always took
// (-config, -scheme, as Go's flag package reads them) to the double dash
// cobra's flags read; -c and other one-letter flags stay as they are.
func longFlags(root *cobra.Command, args []string) []string {
	c, _, err := root.Find(args)
	if err != nil || c.DisableFlagParsing {
		return args
	}
	c.InitDefaultHelpFlag()
	c.InitDefaultVersionFlag()
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(name) > 1 && c.Flags().Lookup(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
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
	root := newRoot()
	root.SetArgs(longFlags(root, args))
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.Execute()
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "splicer: %v\n\n", ue.err)
		printUsage(ue.cmd)
		return 2
	case errors.Is(err, errUsage):
		return 2
	case err != errSilent:
		fmt.Fprintln(e.stderr, "splicer:", err)
	}
	return 1
}

// splicer check: validate configurations, report every error with its file and line, and say which engine each listener would get on this host.

package main

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/supervisor"
	"github.com/splicer/splicer/proxy/httprev"
)

// tlsPath is httprev.TLSPath, probed once for every listener.
var tlsPath = sync.OnceValue(httprev.TLSPath)

// errSilent is returned when the command already printed what went wrong.
var errSilent = supervisor.ErrReported

func checkCommand() *cobra.Command {
	var paths []string
	var engines bool
	c := &cobra.Command{
		Use: "check FILE...", Short: "validate configurations",
		Long: `Usage: splicer check [--engines=false] FILE...
       splicer check --config FILE [--config FILE...]

Validates each FILE without starting anything: unknown keys, keys the
listener's proxy kind would ignore, wrong types, bad addresses, durations,
sizes and engine names, addresses that cannot all be bound (two listeners,
or a listener and admin, on one address), and files named that this user
could not use (admin_token_file unreadable or empty, access_log.path not
writable) are reported each with its line, all at once. Then,
unless --engines=false, it probes which engines this host can run (as the
user running check: run it as the daemon's user) and says which engine each
listener would use and why. Exits 0 when every file is valid, 1 otherwise.
`,
		RunE: func(c *cobra.Command, args []string) error {
			if paths = append(paths, args...); len(paths) == 0 {
				return printUsage(c)
			}
			return check(paths, engines)
		},
	}
	c.Flags().StringArrayVarP(&paths, "config", "c", nil, "configuration file (YAML) to validate; repeatable")
	c.Flags().BoolVar(&engines, "engines", true, "also probe this host's engines and say which one each listener gets")
	return c
}

// check checks the files at paths, and with engines says which engine
// each listener would get here.
func check(paths []string, engines bool) error {
	var failed bool
	var cfgs []*config.Config
	for _, path := range paths {
		supervisor.WarnWritable(slog.New(slog.NewTextHandler(cur.stderr, nil)), path)
		cfg, err := checkConfig(path)
		if err != nil {
			if err != errSilent {
				fmt.Fprintf(cur.stderr, "%s: %v\n", path, err)
			}
			failed = true
			continue
		}
		cfgs = append(cfgs, cfg)
		printListeners(path, cfg)
	}
	if engines {
		for _, cfg := range cfgs {
			printEngineChoice(cfg)
		}
	}
	if failed {
		return errSilent
	}
	return nil
}

func printListeners(path string, cfg *config.Config) {
	fmt.Fprintf(cur.stdout, "%s: ok, %d listener(s)\n", path, len(cfg.Listeners))
	if n := cfg.Workers.Count(); n > 1 {
		fmt.Fprintf(cur.stdout, "  workers: %d processes share every listener (SO_REUSEPORT); max_connections, max_conns, max_queue and max_fails count per worker, max_connections_per_client across them (a client's connections reach one worker)\n", n)
	}
	for _, l := range cfg.Listeners {
		to := ""
		if len(l.Upstream) > 0 {
			to = " -> " + upstreamList(l)
		}
		fmt.Fprintf(cur.stdout, "  %s: %s proxy on %s%s, engine %s\n", l.Name, l.Proxy, l.Listen, to, l.Engine)
	}
}

// upstreamList names a listener's upstream servers, with their weights
// where they differ from 1, backups and max_conns, its balance where not
// round robin, and its queue.
func upstreamList(l config.Listener) string {
	names := make([]string, len(l.Upstream))
	for i, u := range l.Upstream {
		var notes []string
		if u.Weight != config.DefaultWeight {
			notes = append(notes, fmt.Sprintf("weight %d", u.Weight))
		}
		if u.Backup {
			notes = append(notes, "backup")
		}
		if u.MaxConns > 0 {
			notes = append(notes, fmt.Sprintf("max_conns %d", u.MaxConns))
		}
		if u.Resolve {
			notes = append(notes, "each address a server, looked up every "+l.Resolver.ResolveInterval().String())
		}
		names[i] = u.Address
		if u.SRV != "" {
			names[i] = "SRV " + u.SRV + "'s targets, looked up every " + l.Resolver.ResolveInterval().String()
		}
		if len(notes) > 0 {
			names[i] += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	list := "[" + strings.Join(names, ", ") + "]"
	if l.Balance != "" && l.Balance != "round_robin" {
		list += " by " + l.Balance
	}
	if l.QueueTimeout > 0 {
		list += ", every one full: queued up to " + l.QueueTimeout.Std().String()
		if l.MaxQueue > 0 {
			list += fmt.Sprintf(" (at most %d waiting)", l.MaxQueue)
		}
	}
	return list
}

// printEngineChoice builds cfg's engines as the daemon would, says which
// ones this host lacks and why, and which engine each listener starts with.
func printEngineChoice(cfg *config.Config) {
	// Probing must not adopt what a crashed daemon left pinned: closing
	// the probe would then reset those pairs.
	engines := cfg.Engines
	engines.IP.PinDir = config.PinDirOff
	// Nor take the daemon's port range out of the host's ephemeral ports.
	engines.IP.LocalPorts = config.LocalPortsOff
	set := all.Build(engines, slog.New(slog.DiscardHandler))
	defer set.Close()
	fmt.Fprintln(cur.stdout, "engines on this host:")
	for _, e := range set.Engines {
		fmt.Fprintf(cur.stdout, "  %s: available\n", e.Name())
	}
	for _, u := range set.Unavailable {
		fmt.Fprintf(cur.stdout, "  %s: unavailable: %s\n", u.Name, u.Reason)
	}
	for _, l := range cfg.Listeners {
		chain, err := set.Chain(l.Engine)
		if err != nil || len(chain) == 0 {
			fmt.Fprintf(cur.stdout, "  listener %s: no engine can run (%v)\n", l.Name, err)
			continue
		}
		names := make([]string, len(chain))
		for i, e := range chain {
			names[i] = e.Name()
		}
		why := "the first engine available here for " + l.Engine
		switch {
		case l.Engine != "auto" && l.Engine != "" && names[0] != l.Engine:
			why = l.Engine + " is unavailable: " + set.Reason(l.Engine)
		case names[0] == l.Engine:
			why = "as configured"
		}
		fallback := "no fallback: it always runs"
		if len(names) > 1 {
			fallback = "falls back to " + strings.Join(names[1:], ", ")
		}
		fmt.Fprintf(cur.stdout, "  listener %s: engine %s (%s; %s)\n", l.Name, names[0], why, fallback)
		if l.TLS != nil {
			fmt.Fprintf(cur.stdout, "  listener %s: tls: %s\n", l.Name, tlsPath())
		}
	}
}

// splicer run: start the forwarder from a configuration, serve admin endpoints, reload on SIGHUP, upgrade on SIGUSR2, reopen the access log on SIGUSR1, shut down gracefully on SIGINT/SIGTERM.

package main

import (
	"github.com/spf13/cobra"

	"github.com/splicer/splicer/internal/supervisor"
)

func runCommand() *cobra.Command {
	var path, pidFile string
	c := &cobra.Command{
		Use: "run --config FILE", Short: "run the forwarder",
		Long: `Usage: splicer run --config FILE [--pid-file FILE]

Starts every listener of FILE. Logs are structured (log.format: text|json).
With admin set, GET /metrics serves Prometheus metrics, GET /flows the open
pairs and GET /upstreams the back-end servers' state as JSON. Engines this host cannot run (missing root, CAP_BPF, kernel
features) are reported at start and their listeners fall back to the deepest
engine available.

Signals:
  SIGHUP    reload FILE: listeners added, removed or changed take effect, and
            threads at once; open connections finish on the settings they
            started with; a removed listener's connections get
            shutdown_timeout. A file with errors
            is refused (the errors are logged) and the running setup stays.
            Also: 'splicer reload', or POST /reload on the admin endpoint.
  SIGUSR2   upgrade: start the binary now at this path with the same
            arguments, hand it the listening sockets, and once it serves,
            stop accepting and let open connections finish (no connection
            attempt is refused). Also: 'splicer upgrade', or POST /upgrade.
  SIGUSR1   reopen the access log's file (access_log.path), for log
            rotation: move it away, then signal; lines go to a new file at
            the path, the moved one keeps what it had.
  SIGINT, SIGTERM
            stop accepting and let open connections finish for
            shutdown_timeout; a second signal closes them at once.

With workers: N (or auto: one per CPU), this process is a master: it binds
every listener once per worker (SO_REUSEPORT), starts N worker processes
that serve them, restarts a worker that dies, passes the signals above on to
every worker (an upgrade replaces each worker in turn, then the master's own
binary in place, keeping its pid), and serves the admin endpoint for all of
them (/metrics with a worker label, /flows naming each pair's worker).

Engine ip pins its BPF maps and links in engines.ip.pin_dir (default
/sys/fs/bpf/splicer/<FILE's name without extension>): its spliced pairs
outlive a SIGKILL, a crash or an upgrade, and the next 'splicer run' with the
same directory adopts them (/flows lists them as adopted).

Under systemd (Type=notify) it reports readiness, reloads and the new main
process of an upgrade. See examples/ for configurations.
`,
		RunE: func(c *cobra.Command, args []string) error {
			if path == "" || len(args) > 0 {
				return printUsage(c)
			}
			return supervisor.Run(path, pidFile, cur.getenv)
		},
	}
	c.Flags().StringVar(&path, "config", "", "configuration file (YAML)")
	c.Flags().StringVar(&pidFile, "pid-file", "", "write the process id to this file (for 'splicer reload' and 'splicer upgrade')")
	return c
}

// splicer run: start the forwarder from a configuration, serve admin endpoints, reload on SIGHUP, upgrade on SIGUSR2, reopen the access log on SIGUSR1, shut down gracefully on SIGINT/SIGTERM.

package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sdnotify"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	path := fs.String("config", "", "configuration file (YAML)")
	pidFile := fs.String("pid-file", "", "write the process id to this file (for 'splicer reload' and 'splicer upgrade')")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer run --config FILE [--pid-file FILE]

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
`)
	}
	fs.Parse(args)
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return errSilent
	}
	if js, ok := os.LookupEnv(masterStateEnv); ok {
		return resumeMaster(*path, *pidFile, js) // a master's upgrade
	}
	if _, isWorker := os.LookupEnv(workerEnv); !isWorker {
		cfg, err := loadConfig(*path)
		if err != nil {
			return err
		}
		if !(cfg.User != "" && os.Geteuid() != 0) { // not again in the user's copy
			warnWritable(newLogger(cfg.Log), *path)
		}
		if cfg.Workers.Master() {
			return runMaster(*path, *pidFile, cfg)
		}
	}
	// Signals are caught from before the daemon serves: one that came
	// between its start and wait would end it (SIGHUP) or be lost
	// (SIGUSR1: a log rotation's reopen).
	sigs, stop := controlSignals()
	defer stop()
	d, err := startDaemon(*path, *pidFile)
	if errors.Is(err, errHandedOver) {
		return nil // the copy running as the configured user serves
	}
	if err != nil {
		return err
	}
	return d.wait(sigs)
}

// wait handles sigs until the daemon stops, then shuts it down.
func (d *daemon) wait(sigs chan os.Signal) error {
	for {
		select {
		case sig := <-sigs:
			switch {
			case (sig == syscall.SIGHUP || sig == syscall.SIGUSR2) && d.isWorker:
				// The master reloads and upgrades its workers itself,
				// with the sockets it binds for them; a worker doing
				// so on its own would bind its own, which the master's
				// program never picks (as nginx's workers ignore HUP).
				d.log.Warn("signal ignored: a worker reloads and upgrades when its master does; signal the master", "signal", sig.String(), "master", masterPid())
				continue
			case sig == syscall.SIGHUP:
				d.reloadLogged("signal")
				continue
			case sig == syscall.SIGUSR2:
				d.upgradeLogged("signal")
				continue
			case sig == syscall.SIGUSR1:
				d.reopenAccessLog()
				continue
			}
			d.log.Info("shutting down", "signal", sig.String(), "open_pairs", d.f.Flows().Len(), "grace", d.f.Config().ShutdownTimeout.Std().String())
		case <-d.masterGone:
			d.log.Warn("the master is gone: shutting down", "open_pairs", d.f.Flows().Len(), "grace", d.f.Config().ShutdownTimeout.Std().String())
		case <-d.upgraded:
			// ip pairs still spliced when the grace period ends stay
			// pinned for the new process, which adopts them once this
			// one is gone.
			d.f.KeepSplicedPairs()
			d.log.Info("upgraded: draining", "open_pairs", d.f.Flows().Len(), "grace", d.f.Config().ShutdownTimeout.Std().String())
		}
		return d.shutdown(sigs)
	}
}

// controlSignals delivers the signals 'splicer run' acts on, as a single
// process or as a master: SIGHUP (reload), SIGUSR2 (upgrade), SIGUSR1
// (reopen the access log), SIGINT and SIGTERM (stop); stop stops the
// delivery.
func controlSignals() (sigs chan os.Signal, stop func()) {
	sigs = make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR2, syscall.SIGUSR1)
	return sigs, func() { signal.Stop(sigs) }
}

// newLogger builds the slog logger the configuration asks for, on stderr.
func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// notify tells systemd, logging rather than failing when it cannot.
func notify(log *slog.Logger, state string) {
	if err := sdnotify.Notify(state); err != nil {
		log.Warn("systemd notify", "err", err)
	}
}

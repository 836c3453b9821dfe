// Package supervisor is the process model of 'splicer run': a single daemon, or a master and its workers, the copy of itself a root process hands its sockets to, and the new process of an upgrade.
//
// Which of these a process is comes from its environment (role.go, where
// every variable passed between them is encoded and decoded) and its
// configuration. The master's decisions (when to restart a worker, what a
// worker failing a reload or an upgrade leaves running, which processes
// it retires) take the processes they start, signal and replace through
// a small interface (Sys), so that they are tested without running a
// binary.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sdnotify"
)

// ErrReported is returned when what went wrong was already printed (each
// configuration error on its own line).
var ErrReported = errors.New("")

// Run serves the configuration at path until a signal stops it: as the
// master of workers, as one of them, or as a process of its own,
// whichever the environment (getenv: os.LookupEnv) and the file say.
func Run(path, pidFile string, getenv Getenv) error {
	st, err := ReadState(getenv)
	if err != nil {
		return err
	}
	if st.Role == ResumedMaster {
		return resumeMaster(path, pidFile, st.Master) // a master's upgrade
	}
	if st.Role != Worker {
		cfg, err := LoadConfig(os.Stderr, path)
		if err != nil {
			return err
		}
		if !(cfg.User != "" && os.Geteuid() != 0) { // not again in the user's copy
			WarnWritable(newLogger(cfg.Log), path)
		}
		if cfg.Workers.Master() {
			return runMaster(path, pidFile, cfg, st.In)
		}
	}
	// Signals are caught from before the daemon serves: one that came
	// between its start and wait would end it (SIGHUP) or be lost
	// (SIGUSR1: a log rotation's reopen).
	sigs, stop := controlSignals()
	defer stop()
	d, err := startDaemon(path, pidFile, st)
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
				d.log.Warn("signal ignored: a worker reloads and upgrades when its master does; signal the master", "signal", sig.String(), "master", d.state.MasterPid)
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
			d.f.LeaveSplicedPairs()
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

// canceled returns a context that is already done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// WarnWritable warns when another user may change the configuration
// file at path: the file or its directory (unless sticky, as /tmp is)
// writable by others. What the file says runs with the daemon's
// capabilities and names its upstreams and its admin token.
func WarnWritable(log *slog.Logger, path string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	for _, p := range []string{abs, filepath.Dir(abs)} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if m := fi.Mode(); m.Perm()&0o002 != 0 && !(m.IsDir() && m&os.ModeSticky != 0) {
			log.Warn("configuration writable by any user: anyone on this host can change what splicer runs; chmod o-w it", "path", p, "mode", m.String())
		}
	}
}

// LoadConfig loads path and prints each configuration error on its own
// line to w.
func LoadConfig(w io.Writer, path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Fprintln(w, e.Error())
		}
		fmt.Fprintf(w, "%s: %d error(s)\n", path, len(errs))
		return nil, ErrReported
	}
	return cfg, err
}

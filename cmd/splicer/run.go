// splicer run: start the forwarder from a configuration, serve admin endpoints, shut down gracefully on SIGINT/SIGTERM.

package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
)

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	path := fs.String("config", "", "configuration file (YAML)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: splicer run --config FILE

Starts every listener of FILE. Logs are structured (log.format: text|json).
With admin set, GET /metrics serves Prometheus metrics and GET /flows the open
pairs as JSON. SIGINT or SIGTERM stops accepting and lets open pairs finish for
shutdown_timeout; a second signal closes them at once. Engines this host cannot
run (missing root, CAP_BPF, kernel features) are reported at start and their
listeners fall back to the deepest engine available.
See examples/ for configurations.
`)
	}
	fs.Parse(args)
	if *path == "" {
		fs.Usage()
		return errSilent
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log)
	f, err := forwarder.New(cfg, forwarder.Options{Log: log})
	if err != nil {
		return err
	}
	if err := f.Start(); err != nil {
		f.ShutdownTimeout()
		return err
	}
	var adm *admin.Server
	if cfg.Admin != "" {
		if adm, err = admin.Start(cfg.Admin, f, log); err != nil {
			f.ShutdownTimeout()
			return fmt.Errorf("admin: %w", err)
		}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	sig := <-sigs
	log.Info("shutting down", "signal", sig.String(), "open_pairs", f.Flows().Len(), "grace", cfg.ShutdownTimeout.Std().String())
	done := make(chan error, 1)
	go func() { done <- f.ShutdownTimeout() }()
	select {
	case err = <-done:
	case sig = <-sigs:
		log.Warn("second signal: closing open pairs now", "signal", sig.String())
		f.Shutdown(canceled())
		err = <-done
	}
	if adm != nil {
		adm.Close()
	}
	if err != nil {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return nil
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

// The running daemon of 'splicer run': forwarder, admin server, pid file, and the reload and upgrade it performs.

package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/accesslog"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/sdnotify"
	"github.com/splicer/splicer/internal/sockopt"
)

// adminSocket names the admin endpoint's socket among those handed to a new
// process; listener names cannot start with '@'.
const adminSocket = "@admin"

// errHandedOver ends a root process that handed its sockets to a copy of
// itself running as the configured user.
var errHandedOver = errors.New("handed over")

// UpgradeTimeout bounds how long the new process of an upgrade may take to
// start serving before the old one gives up on it and carries on.
const UpgradeTimeout = time.Minute

type daemon struct {
	path, pidFile string
	exe           string // this binary's path at start: an upgrade runs what is there then
	log           *slog.Logger
	f             *forwarder.Forwarder
	adm           *admin.Server
	access        *accesslog.Logger // the access log, reopened on SIGUSR1 and closed at the end
	// caps are the capabilities the daemon keeps when not root
	// (neededCaps at start), given to the process of an upgrade.
	caps []uintptr

	// state is what the environment said; a worker's place among its
	// master's workers when isWorker (worker.go).
	state      State
	worker     worker
	isWorker   bool
	masterGone <-chan struct{} // a worker's master has ended (worker.go)

	mu       sync.Mutex // one reload or upgrade at a time
	upgraded chan struct{}
	done     bool
}

// startDaemon loads path, starts the forwarder and admin server (on the
// sockets of the process this one replaces, if any) and reports ready.
func startDaemon(path, pidFile string, st State) (*daemon, error) {
	cfg, err := LoadConfig(os.Stderr, path)
	if err != nil {
		return nil, err
	}
	w, isWorker := st.Worker, st.Role == Worker
	d := &daemon{path: path, pidFile: pidFile, state: st, worker: w, isWorker: isWorker, upgraded: make(chan struct{})}
	d.prepare(cfg)
	log := newLogger(cfg.Log)
	if isWorker {
		log = log.With("worker", w.index)
		d.masterGone = masterGone(st.MasterPid)
	}
	d.log = log
	in := st.In
	if in == nil && needsDrop(cfg) {
		if err := dropPrivileges(cfg, pidFile, log); err != nil {
			return nil, err
		}
		return nil, errHandedOver
	}
	lockPrivileges(cfg, log)
	logThreads(log, cfg.Threads)
	logMemoryLimit(log, cfg.Memory.Limit)
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	d.exe = exe
	if d.access, err = openAccessLog(cfg.AccessLog); err != nil {
		return nil, fmt.Errorf("access_log: %w", err)
	}
	opts := forwarder.Options{Log: log, AccessLog: d.access, Inherit: in.Listener}
	if isWorker {
		opts.Inherit = d.workerSockets(in)
		// Where the master has no socket for a listener a reload adds:
		// this worker's own beside the other workers'.
		opts.Listen = sockopt.ListenReusePort
	}
	// The capabilities settle before the engines look at what they may
	// do: a binary given its capabilities as permitted only (a non-root
	// container's file capabilities) has none effective until then.
	d.caps = neededCaps(cfg)
	settleCaps(d.caps, log)
	if d.f, err = forwarder.New(cfg, opts); err != nil {
		return nil, err
	}
	takeDrained(d.f, st, log) // before serving: not one client to a drained server
	if err := d.f.Start(); err != nil {
		d.f.ShutdownTimeout()
		return nil, err
	}
	if err := d.startAdmin(cfg.Admin, cfg.AdminToken, in); err != nil {
		d.f.ShutdownTimeout()
		return nil, fmt.Errorf("admin: %w", err)
	}
	if err := writePidFile(pidFile, os.Getpid()); err != nil && !(cfg.User != "" && os.IsPermission(err)) {
		d.log.Warn("pid file", "path", pidFile, "err", err)
	}
	if in != nil && !(isWorker && startedByMaster(st.MasterPid)) {
		log.Info("took over from the previous process", "pid", os.Getpid())
	}
	if err := in.Ready(); err != nil {
		log.Warn("telling the previous process we serve", "err", err)
	}
	notify(log, sdnotify.Ready)
	return d, nil
}

// workerSockets finds a worker's socket of a listener: the one its
// master handed it at its start, else, for a listener a reload adds or
// moves, the one the master bound for it then (socketFromMaster).
func (d *daemon) workerSockets(in *handoff.Inherited) forwarder.InheritFunc {
	service := d.state.MasterSockets
	return func(name, addr string) (net.Listener, error) {
		if ln, err := in.Listener(name, addr); ln != nil || err != nil {
			return ln, err
		}
		return socketFromMaster(service, d.worker, name, addr, d.log)
	}
}

// prepare completes a loaded configuration for this process: the
// default pin directory, and a worker's own share (worker.adjust).
func (d *daemon) prepare(cfg *config.Config) {
	defaultPinDir(cfg, d.path)
	if d.isWorker {
		d.worker.adjust(cfg)
	}
}

// defaultPinDir fills in engines.ip.pin_dir when the file leaves it empty:
// a directory named after the configuration file, so that the next
// process started with the same file adopts this one's spliced pairs.
func defaultPinDir(cfg *config.Config, path string) {
	if cfg.Engines.IP.PinDir == "" {
		cfg.Engines.IP.PinDir = config.DefaultPinDir(path)
	}
}

// openAccessLog returns the access logger c asks for, or nil.
func openAccessLog(c config.AccessLog) (*accesslog.Logger, error) {
	if c.Path == "" {
		return nil, nil
	}
	return accesslog.Open(c.Path, c.Format)
}

// reopenAccessLog opens the access log's file anew (SIGUSR1), for log
// rotation: lines go to a file at its path, the one moved away keeps
// what it has.
func (d *daemon) reopenAccessLog() {
	if d.access == nil {
		d.log.Info("SIGUSR1: no access log to reopen")
		return
	}
	if err := d.access.Reopen(); err != nil {
		d.log.Error("reopening the access log: lines still go to the old file", "path", d.access.Path(), "err", err)
		return
	}
	d.log.Info("access log reopened", "path", d.access.Path())
}

// startAdmin serves the admin endpoint, on the inherited socket if any,
// with the daemon's POST /reload and POST /upgrade.
func (d *daemon) startAdmin(addr, token string, in *handoff.Inherited) error {
	var ln net.Listener
	var err error
	switch {
	case d.isWorker:
		// The master serves addr; a worker answers it on the unix
		// socket the master handed it, which only the master reaches.
		ln, err = in.Socket(adminSocket)
		if ln == nil && err == nil {
			err = errors.New("a worker needs the admin socket its master hands it")
		}
		token = ""
	case addr == "":
		return nil
	default:
		ln, err = in.Listener(adminSocket, addr)
	}
	if err != nil {
		return err
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return err
		}
	}
	d.adm = admin.ServeWith(ln, d.f, d.log, admin.Options{Token: token})
	d.adm.Handle("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		notes, err := d.reloadLogged("admin")
		answer(w, strings.Join(notes, "\n"), err)
	})
	d.adm.Handle("POST /upgrade", func(w http.ResponseWriter, r *http.Request) {
		pid, err := d.upgradeLogged("admin")
		answer(w, fmt.Sprintf("new process %d serves; this one drains", pid), err)
	})
	return nil
}

// answer writes ok or the error of a control request.
func answer(w http.ResponseWriter, ok string, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, strings.TrimSpace("ok\n"+ok))
}

// reloadLogged re-reads the configuration file and applies it. A file with
// errors is refused with every error, as 'splicer check' prints them.
// Its outcome goes to the reload status file, for 'splicer reload
// --pid-file'.
func (d *daemon) reloadLogged(by string) (notes []string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil, errors.New("shutting down")
	}
	began := monotonicNow()
	defer func() { recordReload(d.log, d.pidFile, began, notes, err) }()
	notify(d.log, sdnotify.Reloading)
	defer notify(d.log, sdnotify.Ready)
	d.log.Info("reloading", "config", d.path, "by", by)
	cfg, err := loadForReload(d.log, d.path)
	if err != nil {
		return nil, err
	}
	d.prepare(cfg)
	notes, err = d.f.Reload(cfg)
	if err != nil {
		d.log.Error("reload refused", "err", err)
		return nil, fmt.Errorf("reload refused, the running configuration stays: %w", err)
	}
	for _, n := range notes {
		d.log.Warn("reload: not applied", "note", n)
	}
	logThreads(d.log, cfg.Threads)
	logMemoryLimit(d.log, cfg.Memory.Limit)
	d.log.Info("reloaded", "listeners", len(cfg.Listeners))
	return notes, nil
}

// recordReload writes the outcome of a reload that began at began to
// the status file beside pidFile.
func recordReload(log *slog.Logger, pidFile string, began int64, notes []string, err error) {
	if werr := writeStatus(pidFile, reloadOutcome(began, notes, err)); werr != nil {
		log.Warn("reload status", "path", StatusPath(pidFile), "err", werr)
	}
}

// loadForReload reads the file a reload applies; one with errors is
// refused, each error logged (logRefused), and the running
// configuration stays.
func loadForReload(log *slog.Logger, path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		logRefused(log, err)
		return nil, fmt.Errorf("reload refused, the running configuration stays: %w", err)
	}
	return cfg, nil
}

// logRefused logs why a reload's file was refused: each configuration
// error on its own line, as 'splicer check' prints them.
func logRefused(log *slog.Logger, err error) {
	var errs config.Errors
	if !errors.As(err, &errs) {
		log.Error("reload refused", "err", err)
		return
	}
	for _, e := range errs {
		log.Error("reload refused: configuration error", "err", e.Error())
	}
}

// upgradeLogged starts the binary at d.exe with the same arguments and
// hands it every listening socket; once it serves, the daemon stops (see
// wait). If the new process fails, this one keeps serving.
func (d *daemon) upgradeLogged(by string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return 0, errors.New("shutting down")
	}
	d.log.Info("upgrading", "binary", d.exe, "by", by)
	files, err := d.f.ListenerFiles()
	if err != nil {
		d.log.Error("upgrade failed", "err", err)
		return 0, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if d.adm != nil {
		if files[adminSocket], err = d.adm.File(); err != nil {
			d.log.Error("upgrade failed", "err", err)
			return 0, err
		}
	}
	var child *handoff.Child
	err = withAmbient(d.caps, func() (err error) {
		child, err = handoff.StartAs(d.exe, os.Args[1:], files, UpgradeTimeout, nil, drainedEnviron(drained(d.f))...)
		return err
	})
	if err != nil {
		d.log.Error("upgrade failed: this process keeps serving", "err", err)
		return 0, err
	}
	pid := child.Process.Pid
	d.log.Info("upgrade: new process serves", "pid", pid)
	notify(d.log, "MAINPID="+strconv.Itoa(pid))
	d.done = true
	close(d.upgraded)
	return pid, nil
}

// shutdown stops accepting and lets pairs finish for shutdown_timeout; a
// signal meanwhile closes them at once.
func (d *daemon) shutdown(sigs <-chan os.Signal) error {
	d.mu.Lock()
	d.done = true
	d.mu.Unlock()
	notify(d.log, sdnotify.Stopping)
	done := make(chan error, 1)
	go func() { done <- d.f.ShutdownTimeout() }()
	var err error
	select {
	case err = <-done:
	case sig := <-sigs:
		d.log.Warn("second signal: closing open pairs now", "signal", sig.String())
		d.f.Shutdown(canceled())
		err = <-done
	}
	if d.adm != nil {
		d.adm.Close()
	}
	if err != nil {
		d.log.Warn("shutdown", "err", err)
	}
	removePidFile(d.pidFile)
	if d.access != nil {
		d.access.Close()
	}
	d.log.Info("stopped")
	return nil
}

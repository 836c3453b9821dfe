// The master of 'splicer run' with workers > 1: binds every listener once per worker, starts the workers, restarts one that dies, and passes on reload, upgrade and shutdown.

package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/reuseport"
	"github.com/splicer/splicer/internal/sdnotify"
	"github.com/splicer/splicer/internal/sockopt"
)

// masterPidEnv tells a worker its master's pid: a worker whose master is
// gone (killed) drains and exits rather than serve on unsupervised.
const masterPidEnv = "SPLICER_MASTER_PID"

// restartDelay is how long the master waits before it restarts a worker
// that died within restartDelay of its start, so that a worker that
// cannot start does not spin.
const restartDelay = time.Second

type master struct {
	path, pidFile string
	exe           string // this binary at start: an upgrade runs what is there then
	log           *slog.Logger
	count         int
	// dir holds the workers' admin sockets: only this user may enter it.
	dir string
	// files are each worker's sockets: one per listener, by its name,
	// bound with SO_REUSEPORT, and its admin socket (adminSocket). The
	// master keeps them, so that a worker's accept queue outlives the
	// worker and a restarted one takes up the same socket.
	files []map[string]*os.File
	admin *masterAdmin
	// adminLn is the admin endpoint's socket until serveAdmin serves it.
	adminLn net.Listener
	// exited receives the end of every worker process.
	exited chan workerExit

	restarts prometheus.Counter

	mu       sync.Mutex // one reload, upgrade or restart at a time
	cfg      *config.Config
	pids     []int // each worker's current process
	retired  []int // processes an upgrade replaced (masterState.Retired)
	started  []time.Time
	stopping bool
}

// workerExit is a worker process's end.
type workerExit struct {
	index, pid int
	err        error
}

// runMaster serves cfg, read from path, with cfg.Workers processes
// until a signal stops it.
func runMaster(path, pidFile string, cfg *config.Config) error {
	log := newLogger(cfg.Log)
	in, err := handoff.FromEnv()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m := &master{path: path, pidFile: pidFile, exe: exe, log: log, count: cfg.Workers.Count(), cfg: cfg,
		exited: make(chan workerExit, 16)}
	m.pids = make([]int, m.count)
	m.started = make([]time.Time, m.count)
	// Processes a worker's upgrade starts become the master's children
	// once the worker that started them exits: the master reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot adopt the workers an upgrade starts (PR_SET_CHILD_SUBREAPER)", "err", err)
	}
	if in != nil {
		err = m.takeSockets(in) // from the root master of handToUser
	} else {
		err = m.bind(cfg)
	}
	if err != nil {
		m.closeFiles(true)
		return err
	}
	if in == nil && needsDrop(cfg) {
		err := m.handToUser()
		m.closeFiles(err != nil) // the user's master has them, and the directory
		return err
	}
	lockPrivileges(cfg, log)
	if err := m.serveAdmin(cfg, m.adminLn); err != nil {
		m.closeFiles(true)
		return fmt.Errorf("admin: %w", err)
	}
	for i := range m.count {
		if err := m.start(i); err != nil {
			m.stopWorkers(syscall.SIGKILL)
			m.admin.close()
			m.closeFiles(true)
			return fmt.Errorf("worker %d: %w", i, err)
		}
	}
	if err := in.Ready(); err != nil {
		log.Warn("telling the root process we serve", "err", err)
	}
	if err := writePidFile(pidFile, os.Getpid()); err != nil && !(cfg.User != "" && os.IsPermission(err)) {
		log.Warn("pid file", "path", pidFile, "err", err)
	}
	log.Info("master serves", "workers", m.count, "pid", os.Getpid())
	notify(log, sdnotify.Ready)
	return m.loop()
}

// bind opens every listener's socket once per worker, the workers'
// admin sockets and the directory that holds them, and the admin
// endpoint's socket.
func (m *master) bind(cfg *config.Config) error {
	if cfg.Admin != "" {
		ln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			return fmt.Errorf("admin: %w", err)
		}
		m.adminLn = ln
	}
	removeStaleDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", workersDirPrefix, os.Getpid()))
	if err != nil {
		return err
	}
	m.dir = dir
	m.files = make([]map[string]*os.File, m.count)
	for i := range m.files {
		m.files[i] = map[string]*os.File{}
		if m.files[i][adminSocket], err = bindUnix(m.adminPath(i)); err != nil {
			return err
		}
	}
	for _, l := range cfg.Listeners {
		if err := m.bindListener(l.Name, l.Listen); err != nil {
			return err
		}
	}
	return nil
}

// workersDirPrefix begins the name of a master's directory of admin
// sockets in the temporary directory, followed by the master's pid.
const workersDirPrefix = "splicer-workers-"

// removeStaleDirs removes the directories of masters that are gone
// without removing their own (killed): a master that stops removes its
// own.
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), workersDirPrefix+"*"))
	for _, d := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), workersDirPrefix), "-")
		if pid, err := strconv.Atoi(pidText); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(d)
		}
	}
}

// bindListener binds addr once per worker with SO_REUSEPORT; port 0 is
// chosen by the first bind and taken by the others. New connections then
// go to the workers in turn (internal/reuseport), or where the program
// cannot load (no CAP_BPF), by the kernel's hash of their addresses.
func (m *master) bindListener(name, addr string) error {
	group := make([]*os.File, 0, len(m.files))
	for i := range m.files {
		ln, err := sockopt.ListenReusePort("tcp", addr)
		if err != nil {
			return fmt.Errorf("listener %s: %w", name, err)
		}
		addr = ln.Addr().String()
		f, err := handoff.Dup(ln.(*net.TCPListener))
		ln.Close()
		if err != nil {
			return fmt.Errorf("listener %s: %w", name, err)
		}
		m.files[i][name] = f
		group = append(group, f)
	}
	if err := reuseport.Spread(group); err != nil {
		m.log.Warn("new connections go to the workers by the kernel's hash of their addresses, not in turn", "listener", name, "err", err)
	}
	return nil
}

// bindUnix listens on a unix socket at path and returns it as a file.
func bindUnix(path string) (*os.File, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the file stays for the worker's copy
	defer ln.Close()
	return handoff.Dup(ln)
}

func (m *master) adminPath(i int) string { return fmt.Sprintf("%s/worker-%d.sock", m.dir, i) }

// closeFiles closes the master's sockets and, with removeDir, the
// directory of the workers' admin sockets.
func (m *master) closeFiles(removeDir bool) {
	for _, fs := range m.files {
		for _, f := range fs {
			f.Close()
		}
	}
	if m.adminLn != nil {
		m.adminLn.Close()
	}
	if removeDir && m.dir != "" {
		os.RemoveAll(m.dir)
	}
}

// start runs worker i on its sockets and waits until it serves.
func (m *master) start(i int) error {
	w := worker{index: i, count: m.count}
	child, err := handoff.StartAs(m.exe, []string{"run", "--config", m.path}, m.files[i], upgradeTimeout, nil,
		w.env(), masterPidEnv+"="+strconv.Itoa(os.Getpid()), "NOTIFY_SOCKET=")
	if err != nil {
		return err
	}
	pid := child.Process.Pid
	m.pids[i], m.started[i] = pid, time.Now()
	go func() { m.exited <- workerExit{index: i, pid: pid, err: <-child.Exited()} }()
	m.log.Info("worker serves", "worker", i, "pid", pid)
	return nil
}

// loop handles signals and worker ends until a shutdown.
func (m *master) loop() error {
	sigs, stop := controlSignals()
	defer stop()
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				m.reloadLogged("signal")
			case syscall.SIGUSR2:
				m.upgradeLogged("signal")
			default:
				m.log.Info("shutting down", "signal", sig.String(), "workers", m.count)
				return m.shutdown(sigs)
			}
		case e := <-m.exited:
			m.workerEnded(e)
		}
	}
}

// workerEnded restarts a worker whose process ended, unless that process
// was retired (an upgrade replaced it) or the master stops.
func (m *master) workerEnded(e workerExit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pids[e.index] != e.pid || m.stopping {
		m.log.Debug("retired worker process ended", "worker", e.index, "pid", e.pid)
		m.retired = slices.DeleteFunc(m.retired, func(pid int) bool { return pid == e.pid })
		return
	}
	m.pids[e.index] = 0
	m.restarts.Inc()
	delay := time.Duration(0)
	if time.Since(m.started[e.index]) < restartDelay {
		delay = restartDelay
	}
	m.log.Error("worker exited: restarting it", "worker", e.index, "pid", e.pid, "err", errText(e.err), "after", delay.String())
	time.AfterFunc(delay, func() { m.restart(e.index) })
}

// restart starts worker i again, retrying while it fails.
func (m *master) restart(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping || m.pids[i] != 0 {
		return
	}
	if err := m.start(i); err != nil {
		m.log.Error("worker did not start: trying again", "worker", i, "err", err, "after", restartDelay.String())
		time.AfterFunc(restartDelay, func() { m.restart(i) })
	}
}

func errText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// shutdown has every worker drain and stop (SIGTERM: each lets its pairs
// finish for shutdown_timeout); a signal meanwhile passes on and closes
// them at once.
func (m *master) shutdown(sigs <-chan os.Signal) error {
	m.mu.Lock()
	m.stopping = true
	grace := m.cfg.ShutdownTimeout.Std()
	m.mu.Unlock()
	notify(m.log, sdnotify.Stopping)
	m.stopWorkers(syscall.SIGTERM)
	// Past the workers' own grace, and some time for them to close.
	deadline := time.After(grace + 10*time.Second)
	for m.running() > 0 {
		select {
		case e := <-m.exited:
			m.mu.Lock()
			if m.pids[e.index] == e.pid {
				m.pids[e.index] = 0
			}
			m.mu.Unlock()
		case sig := <-sigs:
			m.log.Warn("second signal: workers close their pairs now", "signal", sig.String())
			m.stopWorkers(syscall.SIGTERM)
		case <-deadline:
			m.log.Error("workers still running past shutdown_timeout: killing them")
			m.stopWorkers(syscall.SIGKILL)
			deadline = nil
		}
	}
	m.admin.close()
	m.closeFiles(true)
	removePidFile(m.pidFile)
	m.log.Info("stopped")
	return nil
}

// running counts the workers whose process has not ended.
func (m *master) running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, pid := range m.pids {
		if pid != 0 {
			n++
		}
	}
	return n
}

// stopWorkers sends sig to every worker's current process.
func (m *master) stopWorkers(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range m.pids {
		if pid != 0 {
			syscall.Kill(pid, sig)
		}
	}
}

// The master of 'splicer run' with workers > 1: binds every listener once per worker, starts the workers, restarts one that dies, and passes on reload, upgrade and shutdown.

package supervisor

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

// restartDelay is how long the master waits before it restarts a worker
// that died within restartDelay of its start, so that a worker that
// cannot start does not spin.
const restartDelay = time.Second

type master struct {
	path, pidFile string
	exe           string // this binary at start: an upgrade runs what is there then
	log           *slog.Logger
	count         int
	sys           sys // processes and time (osSys but in tests)
	// caps are the capabilities the master and its workers keep when
	// not root (neededCaps), given to each worker it starts.
	caps []uintptr
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
	// spread is each listener's program, by name (internal/reuseport).
	spread map[string]*reuseport.Group
	// socketsLn serves the sockets of listeners a reload adds
	// (serveSockets); offers are those of the reload under way.
	socketsLn *net.UnixListener
	offersMu  sync.Mutex
	offers    map[string]offer

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

// newMaster is a master of count workers, none started yet.
func newMaster(path, pidFile, exe string, log *slog.Logger, cfg *config.Config, count int) *master {
	return &master{path: path, pidFile: pidFile, exe: exe, log: log, cfg: cfg, count: count, caps: neededCaps(cfg), sys: osSys{},
		pids: make([]int, count), started: make([]time.Time, count),
		spread: map[string]*reuseport.Group{}, exited: make(chan workerExit, 16)}
}

// runMaster serves cfg, read from path, with cfg.Workers processes
// until a signal stops it.
func runMaster(path, pidFile string, cfg *config.Config, in *handoff.Inherited) error {
	// Signals are caught from the start, as a single process catches
	// them: a SIGHUP between "master serves" and the loop would end the
	// master, a SIGUSR1 would be lost.
	sigs, stop := controlSignals()
	defer stop()
	log := newLogger(cfg.Log)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m := newMaster(path, pidFile, exe, log, cfg, cfg.Workers.Count())
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
	if err := m.serveSockets(); err != nil {
		m.admin.close()
		m.closeFiles(true)
		return err
	}
	for i := range m.count {
		if err := m.start(i); err != nil {
			m.stopWorkers(syscall.SIGKILL, false)
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
	settleCaps(m.caps, log)
	log.Info("master serves", "workers", m.count, "pid", os.Getpid())
	notify(log, sdnotify.Ready)
	return m.loop(sigs)
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
		g, err := m.bindGroup(l)
		if err != nil {
			return err
		}
		m.install(l.Name, g)
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

// group is a listener's sockets, one per worker, bound to one address
// with SO_REUSEPORT, and the program that picks among them.
type group struct {
	files  []*os.File
	spread *reuseport.Group // nil where the program could not load
}

// bindGroup binds l's address once per worker with SO_REUSEPORT; port 0
// is chosen by the first bind and taken by the others. New connections
// then go to the workers in turn, or with max_connections_per_client by
// the client's address, so that one worker counts all of a client's
// (internal/reuseport); where the program cannot load (no CAP_BPF), by
// the kernel's hash of their addresses and ports.
func (m *master) bindGroup(l config.Listener) (group, error) {
	var g group
	fail := func(err error) (group, error) {
		g.close()
		return group{}, fmt.Errorf("listener %s: %w", l.Name, err)
	}
	addr := l.Listen
	for range m.count {
		ln, err := sockopt.ListenReusePort("tcp", addr)
		if err != nil {
			return fail(err)
		}
		addr = ln.Addr().String()
		f, err := handoff.Dup(ln.(*net.TCPListener))
		ln.Close()
		if err != nil {
			return fail(err)
		}
		g.files = append(g.files, f)
	}
	spread, err := reuseport.Spread(g.files, spreadMode(l))
	if err != nil {
		m.log.Warn("new connections go to the workers by the kernel's hash of their addresses and ports", "listener", l.Name, "err", err)
		if l.MaxConnectionsPerClient > 0 {
			m.log.Warn("max_connections_per_client holds per worker: a client's connections may reach several", "listener", l.Name)
		}
	}
	g.spread = spread
	return g, nil
}

// takeSpread takes over listener name's program from the process that
// attached it, by its file (closed here), so that a reload may still
// change its mode.
func (m *master) takeSpread(name string, f *os.File) {
	defer f.Close()
	g, err := reuseport.FromFile(f)
	if err != nil {
		m.log.Warn("a reload cannot change how this listener's connections are spread", "listener", name, "err", err)
		return
	}
	m.spread[name] = g
}

// spreadMode is how l's new connections are given to the workers.
func spreadMode(l config.Listener) reuseport.Mode {
	if l.MaxConnectionsPerClient > 0 {
		return reuseport.ByClient
	}
	return reuseport.InTurn
}

// install makes g the sockets of listener name, closing those it
// replaces; a worker whose socket is nil has none (it did not take the
// reload that added the listener).
func (m *master) install(name string, g group) {
	for i, f := range g.files {
		if old := m.files[i][name]; old != nil {
			old.Close()
		}
		if f == nil {
			delete(m.files[i], name)
			continue
		}
		m.files[i][name] = f
	}
	m.spread[name].Close()
	m.spread[name] = g.spread
}

// close closes the master's copies of g's sockets and its handle of
// the program.
func (g group) close() {
	for _, f := range g.files {
		if f != nil {
			f.Close()
		}
	}
	g.spread.Close()
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
	if m.socketsLn != nil {
		m.socketsLn.Close()
	}
	if removeDir && m.dir != "" {
		os.RemoveAll(m.dir)
	}
}

// start runs worker i on its sockets and waits until it serves.
func (m *master) start(i int) error {
	w := worker{index: i, count: m.count}
	env := append(workerEnviron(w, os.Getpid(), filepath.Join(m.dir, socketServiceName)), "NOTIFY_SOCKET=")
	pid, exited, err := m.sys.startWorker(m.exe, []string{"run", "--config", m.path}, m.files[i], env, m.caps)
	if err != nil {
		return err
	}
	m.pids[i], m.started[i] = pid, m.sys.now()
	go func() { m.exited <- workerExit{index: i, pid: pid, err: <-exited} }()
	m.log.Info("worker serves", "worker", i, "pid", pid)
	return nil
}

// loop handles sigs and worker ends until a shutdown.
func (m *master) loop(sigs chan os.Signal) error {
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				m.reloadLogged("signal")
			case syscall.SIGUSR2:
				m.upgradeLogged("signal")
			case syscall.SIGUSR1:
				// The workers write the access log, draining ones too.
				m.log.Info("workers reopen the access log", "signal", sig.String())
				m.stopWorkers(syscall.SIGUSR1, true)
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
		m.forgetRetired(e.pid)
		return
	}
	m.pids[e.index] = 0
	m.restarts.Inc()
	delay := time.Duration(0)
	if m.sys.now().Sub(m.started[e.index]) < restartDelay {
		delay = restartDelay
	}
	m.log.Error("worker exited: restarting it", "worker", e.index, "pid", e.pid, "err", errText(e.err), "after", delay.String())
	m.sys.afterFunc(delay, func() { m.restart(e.index) })
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
		m.sys.afterFunc(restartDelay, func() { m.restart(i) })
	}
}

func errText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// shutdown has every worker drain and stop (SIGTERM: each lets its pairs
// finish for shutdown_timeout), and waits as well for the workers an
// upgrade retired, already draining: under systemd (KillMode=mixed) what
// is left when the master exits is killed. A signal meanwhile passes on
// to all and closes their pairs at once.
func (m *master) shutdown(sigs <-chan os.Signal) error {
	m.mu.Lock()
	m.stopping = true
	grace := m.cfg.ShutdownTimeout.Std()
	m.mu.Unlock()
	notify(m.log, sdnotify.Stopping)
	m.stopWorkers(syscall.SIGTERM, false)
	// Past the workers' own grace, and some time for them to close.
	deadline := time.After(grace + 10*time.Second)
	// Retired workers the new binary reaps (reap) end unannounced.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for m.left() > 0 {
		select {
		case e := <-m.exited:
			m.ended(e)
		case <-tick.C:
		case sig := <-sigs:
			m.log.Warn("second signal: workers close their pairs now", "signal", sig.String())
			m.stopWorkers(syscall.SIGTERM, true)
		case <-deadline:
			m.log.Error("workers still running past shutdown_timeout: killing them")
			m.stopWorkers(syscall.SIGKILL, true)
			deadline = nil
		}
	}
	m.admin.close()
	m.closeFiles(true)
	removePidFile(m.pidFile)
	m.log.Info("stopped")
	return nil
}

// ended notes the end of a worker's process, current or retired.
func (m *master) ended(e workerExit) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pids[e.index] == e.pid {
		m.pids[e.index] = 0
		return
	}
	m.forgetRetired(e.pid)
}

// forgetRetired drops a retired worker that ended; m.mu is held.
func (m *master) forgetRetired(pid int) {
	m.retired = slices.DeleteFunc(m.retired, func(p int) bool { return p == pid })
}

// left counts the worker processes that have not ended, retired ones
// included.
func (m *master) left() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.retired)
	for _, pid := range m.pids {
		if pid != 0 {
			n++
		}
	}
	return n
}

// stopWorkers sends sig (a stop, or SIGUSR1) to every worker's current
// process, and with retired to those an upgrade replaced that still drain.
func (m *master) stopWorkers(sig syscall.Signal, retired bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pids := m.pids
	if retired {
		pids = append(slices.Clone(m.pids), m.retired...)
	}
	for _, pid := range pids {
		if pid != 0 {
			m.sys.kill(pid, sig)
		}
	}
}

// What the master passes on to its workers: a reload, an upgrade (each worker hands its sockets to a new process, then the master replaces its own binary in place), and how it follows processes it did not start.

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sdnotify"
	"github.com/splicer/splicer/internal/sockopt"
)

// reloadLogged re-reads the configuration and has every worker apply it.
// A file with errors is refused before any worker sees it. The outcome
// goes to the reload status file, for 'splicer reload --pid-file'.
func (m *master) reloadLogged(by string) (notes []string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return nil, errors.New("shutting down")
	}
	began := monotonicNow()
	defer func() { recordReload(m.log, m.pidFile, began, notes, err) }()
	notify(m.log, sdnotify.Reloading)
	defer notify(m.log, sdnotify.Ready)
	m.log.Info("reloading", "config", m.path, "by", by, "workers", m.count)
	cfg, err := loadForReload(m.log, m.path)
	if err != nil {
		return nil, err
	}
	if cfg.Workers.Count() != m.count {
		notes = append(notes, fmt.Sprintf("workers: %d until a restart (a reload neither starts nor stops workers)", m.count))
	}
	fresh, err := m.bindAdded(cfg)
	if err != nil {
		m.log.Error("reload refused", "err", err)
		return nil, fmt.Errorf("reload refused, the running configuration stays: %w", err)
	}
	m.offer(fresh)
	took, answered, err := m.reloadWorkers()
	m.offer(nil)
	notes = append(notes, answered...)
	if took == 0 {
		for _, o := range fresh {
			o.close()
		}
		return notes, err
	}
	// A worker that restarts reads the file: what the master holds
	// follows it once one worker has. The sockets of the workers that
	// did not reload are closed: nobody would accept on them, and the
	// program would keep picking them.
	for _, o := range fresh {
		for i := took; i < m.count; i++ {
			o.files[i].Close()
			o.files[i] = nil
		}
	}
	m.retireSockets(cfg)
	m.respread(cfg, fresh)
	for name, o := range fresh {
		m.install(name, o.group)
	}
	m.cfg = cfg
	if err != nil {
		return notes, err
	}
	m.log.Info("reloaded", "listeners", len(cfg.Listeners))
	return notes, nil
}

// reloadWorkers has each worker reload, in turn, until one fails: how
// many took the new configuration, and what the first said it did not
// apply.
func (m *master) reloadWorkers() (took int, notes []string, err error) {
	for i := range m.count {
		body, status, err := m.ask(context.Background(), i, "POST", "/reload", UpgradeTimeout)
		if err == nil && status != 200 {
			err = errors.New(strings.TrimSpace(string(body)))
		}
		if err != nil {
			m.log.Error("reload failed in a worker", "worker", i, "err", err)
			return i, notes, fmt.Errorf("worker %d: %w (workers before it took the new configuration)", i, err)
		}
		if i == 0 { // the workers run one file: the first says what it did not apply
			notes = answerNotes(body)
		}
	}
	return m.count, notes, nil
}

// bindAdded binds a group of sockets, one per worker, for each listener
// of cfg the master holds none for at its address: new listeners, and
// those cfg moves. A listener that cannot bind refuses the reload before
// any worker sees it.
func (m *master) bindAdded(cfg *config.Config) (map[string]offer, error) {
	held := m.listenAddrs()
	fresh := map[string]offer{}
	for _, l := range cfg.Listeners {
		if addr, ok := held[l.Name]; ok && addr == l.Listen {
			continue
		}
		g, err := m.bindGroup(l)
		if err != nil {
			for _, o := range fresh {
				o.close()
			}
			return nil, err
		}
		fresh[l.Name] = offer{listen: l.Listen, group: g}
	}
	return fresh, nil
}

// answerNotes are the lines after "ok" of a control request's answer.
func answerNotes(body []byte) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n")[1:] {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// retireSockets closes the master's copies of the sockets of listeners
// cfg no longer has at the same address: while a copy stays open the
// kernel would still queue new connections on it, for no worker.
func (m *master) retireSockets(cfg *config.Config) {
	keep := map[string]string{}
	for _, l := range cfg.Listeners {
		keep[l.Name] = l.Listen
	}
	for name, old := range m.listenAddrs() {
		if keep[name] == old {
			continue
		}
		for _, files := range m.files {
			files[name].Close()
			delete(files, name)
		}
		m.spread[name].Close()
		delete(m.spread, name)
	}
}

// respread sets the program of each listener the master keeps (not in
// fresh) to the mode cfg asks for: a reload may set or clear
// max_connections_per_client.
func (m *master) respread(cfg *config.Config, fresh map[string]offer) {
	for _, l := range cfg.Listeners {
		if _, ok := fresh[l.Name]; ok {
			continue
		}
		g := m.spread[l.Name]
		if g == nil && l.MaxConnectionsPerClient > 0 {
			m.log.Warn("max_connections_per_client holds per worker: the listener's connections go by the kernel's hash, and a client's may reach several", "listener", l.Name)
		}
		if err := g.SetMode(spreadMode(l)); err != nil {
			m.log.Warn("spreading new connections", "listener", l.Name, "mode", spreadMode(l).String(), "err", err)
		}
	}
}

// listenAddrs is where each listener whose sockets the master holds was
// configured to listen.
func (m *master) listenAddrs() map[string]string {
	out := map[string]string{}
	for _, l := range m.cfg.Listeners {
		if m.files[0][l.Name] != nil {
			out[l.Name] = l.Listen
		}
	}
	return out
}

// upgradeLogged upgrades each worker in turn (its own upgrade: a new
// process on its sockets, the old one draining), then replaces the
// master's binary in place (execve: same pid, its sockets and workers
// kept). A worker that fails stops the upgrade: the workers before it
// run the new binary, the rest the old.
func (m *master) upgradeLogged(by string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return errors.New("shutting down")
	}
	m.log.Info("upgrading", "binary", m.exe, "by", by, "workers", m.count)
	for i := range m.count {
		body, status, err := m.ask(context.Background(), i, "POST", "/upgrade", UpgradeTimeout+10*time.Second)
		var pid int
		if err == nil && status == 200 {
			_, err = fmt.Sscanf(strings.Join(answerNotes(body), " "), "new process %d serves", &pid)
		} else if err == nil {
			err = errors.New(strings.TrimSpace(string(body)))
		}
		if err != nil {
			m.log.Error("upgrade failed in a worker: it keeps serving", "worker", i, "err", err)
			return fmt.Errorf("worker %d: %w (workers before it run the new binary)", i, err)
		}
		m.log.Info("worker upgraded", "worker", i, "pid", pid, "was", m.pids[i])
		m.retired = append(m.retired, m.pids[i])
		m.pids[i], m.started[i] = pid, m.sys.now()
		go m.watch(i, pid)
	}
	// After the answer to whoever asked has gone out.
	m.sys.afterFunc(100*time.Millisecond, m.reexec)
	return nil
}

// reexec replaces this process's binary with m.exe, handing it the
// state in the environment. It returns only when execve fails: the
// master then carries on with the old binary.
func (m *master) reexec() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	var passed passedOn
	st, err := m.state(&passed)
	if err == nil {
		env := masterStateEnviron(os.Environ(), st)
		m.log.Info("master: running the new binary", "binary", m.exe)
		err = m.sys.exec(m.exe, os.Args, env, m.caps)
	}
	passed.undo() // or the workers it starts next would inherit them
	m.log.Error("master keeps the old binary (its workers run the new one)", "err", err)
}

// counterValue is c's count.
func counterValue(c prometheus.Counter) float64 {
	var mt dto.Metric
	c.Write(&mt)
	return mt.GetCounter().GetValue()
}

// passedOn are the descriptors state made to survive the execve: the
// master's own, and duplicates made for it.
type passedOn struct{ kept, dups []*os.File }

// keep clears f's close-on-exec flag and returns its descriptor; with
// dup, f is a duplicate that undo closes. Not f.Fd(), which would put a
// socket shared with the workers in blocking mode: their accepts would
// then block in the kernel.
func (p *passedOn) keep(f *os.File, dup bool) (fd int, err error) {
	if dup {
		p.dups = append(p.dups, f)
	}
	err = sockopt.WithFD(f, func(raw int) error {
		fd = raw
		_, err := unix.FcntlInt(uintptr(raw), unix.F_SETFD, 0)
		return err
	})
	if err == nil && !dup {
		p.kept = append(p.kept, f)
	}
	return fd, err
}

// undo takes the descriptors back when the execve failed.
func (p *passedOn) undo() {
	for _, f := range p.kept {
		sockopt.WithFD(f, func(fd int) error {
			syscall.CloseOnExec(fd)
			return nil
		})
	}
	for _, f := range p.dups {
		f.Close()
	}
}

// state is what the master hands its next binary, every descriptor made
// to survive the execve (passed).
func (m *master) state(passed *passedOn) (*masterState, error) {
	st := &masterState{Config: m.cfg.Source, ConfigName: m.cfg.SourceName, Dir: m.dir, Admin: -1, Pids: m.pids, Retired: m.retired, Spread: map[string]int{},
		Restarts: int(counterValue(m.restarts))}
	var err error
	for _, files := range m.files {
		fds := map[string]int{}
		for name, f := range files {
			if fds[name], err = passed.keep(f, false); err != nil {
				return nil, err
			}
		}
		st.Files = append(st.Files, fds)
	}
	for name, g := range m.spread {
		f, err := g.File()
		if err != nil {
			continue // no program: nothing to flip
		}
		if st.Spread[name], err = passed.keep(f, true); err != nil {
			return nil, err
		}
	}
	if m.admin.srv != nil {
		f, err := m.admin.srv.File()
		if err != nil {
			return nil, err
		}
		if st.Admin, err = passed.keep(f, true); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// resumeMaster goes on as the master whose binary this process replaced:
// the same sockets, workers and admin endpoint.
func resumeMaster(path, pidFile string, st *masterState) error {
	sigs, stop := controlSignals() // from the start, as runMaster
	defer stop()
	cfg, err := config.LoadBytes(st.ConfigName, st.Config)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m := newMaster(path, pidFile, exe, newLogger(cfg.Log), cfg, len(st.Pids))
	m.dir, m.pids, m.retired = st.Dir, st.Pids, st.Retired
	for _, fds := range st.Files {
		files := map[string]*os.File{}
		for name, fd := range fds {
			syscall.CloseOnExec(fd)
			files[name] = os.NewFile(uintptr(fd), name)
		}
		m.files = append(m.files, files)
	}
	for name, fd := range st.Spread {
		syscall.CloseOnExec(fd)
		m.takeSpread(name, os.NewFile(uintptr(fd), name))
	}
	var ln net.Listener
	if st.Admin >= 0 {
		f := os.NewFile(uintptr(st.Admin), "admin")
		ln, err = net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("admin: %w", err)
		}
	}
	if err := m.serveAdmin(cfg, ln); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	m.restarts.Add(float64(st.Restarts))
	if err := m.serveSockets(); err != nil {
		return err
	}
	for i, pid := range m.pids {
		m.started[i] = m.sys.now()
		go m.watch(i, pid)
	}
	for _, pid := range st.Retired {
		go m.reap(pid)
	}
	settleCaps(m.caps, m.log)
	m.log.Info("master upgraded", "binary", exe, "pid", os.Getpid(), "workers", m.count)
	notify(m.log, sdnotify.Ready)
	return m.loop(sigs)
}

// watch reports the end of worker i's process pid, which the master may
// not have started (an upgrade's new worker; any worker after the
// master's own execve).
func (m *master) watch(i, pid int) {
	m.exited <- workerExit{index: i, pid: pid, err: m.sys.waitEnd(pid)}
}

// reap waits for a retired worker, started by this process before its
// execve, to end, and reaps it: no Go code of the old binary is left to.
func (m *master) reap(pid int) {
	m.sys.waitEnd(pid)
	m.log.Debug("retired worker process ended", "pid", pid)
	m.mu.Lock()
	m.forgetRetired(pid)
	m.mu.Unlock()
}

// waitEnd blocks until process pid has ended, through a pidfd (it need
// not be this process's child), reaps it if it is, and says how it
// ended where it could tell.
func waitEnd(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err // gone, and reaped, already
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if err != unix.EINTR {
			break
		}
	}
	var ws unix.WaitStatus
	if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid && err == nil {
		return waitError(ws)
	}
	return errors.New("ended")
}

// waitError says how a process ended, as exec.ExitError would; nil for
// exit status 0.
func waitError(ws unix.WaitStatus) error {
	switch {
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	case ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

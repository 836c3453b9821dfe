// What the master passes on to its workers: a reload, an upgrade (each worker hands its sockets to a new process, then the master replaces its own binary in place), and how it follows processes it did not start.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sdnotify"
	"github.com/splicer/splicer/internal/sockopt"
)

// reloadLogged re-reads the configuration and has every worker apply it.
// A file with errors is refused before any worker sees it.
func (m *master) reloadLogged(by string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return nil, errors.New("shutting down")
	}
	notify(m.log, sdnotify.Reloading)
	defer notify(m.log, sdnotify.Ready)
	m.log.Info("reloading", "config", m.path, "by", by, "workers", m.count)
	cfg, err := config.Load(m.path)
	if err != nil {
		logRefused(m.log, err)
		return nil, fmt.Errorf("reload refused, the running configuration stays: %w", err)
	}
	var notes []string
	if cfg.Workers.Count() != m.count {
		notes = append(notes, fmt.Sprintf("workers: %d until a restart (a reload neither starts nor stops workers)", m.count))
	}
	for i := range m.count {
		body, status, err := m.ask(context.Background(), i, "POST", "/reload", upgradeTimeout)
		if err == nil && status != 200 {
			err = errors.New(strings.TrimSpace(string(body)))
		}
		if err != nil {
			m.log.Error("reload failed in a worker", "worker", i, "err", err)
			return notes, fmt.Errorf("worker %d: %w (workers before it took the new configuration)", i, err)
		}
		if i == 0 { // the workers run one file: the first says what it did not apply
			notes = append(notes, answerNotes(body)...)
		}
	}
	m.retireSockets(cfg)
	m.cfg = cfg
	m.log.Info("reloaded", "listeners", len(cfg.Listeners))
	return notes, nil
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
		body, status, err := m.ask(context.Background(), i, "POST", "/upgrade", upgradeTimeout+10*time.Second)
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
		m.pids[i], m.started[i] = pid, time.Now()
		go m.watch(i, pid)
	}
	// After the answer to whoever asked has gone out.
	time.AfterFunc(100*time.Millisecond, m.reexec)
	return nil
}

// masterStateEnv carries the master's sockets and workers across its
// execve into the new binary (resumeMaster).
const masterStateEnv = "SPLICER_MASTER_STATE"

type masterState struct {
	Config []byte           `json:"config"` // the running configuration, as YAML
	Dir    string           `json:"dir"`
	Files  []map[string]int `json:"files"` // per worker: socket name -> fd
	Admin  int              `json:"admin"` // the admin endpoint's fd, -1 without one
	Pids   []int            `json:"pids"`
	// Retired are workers an upgrade replaced that may still drain:
	// the next binary reaps them.
	Retired []int `json:"retired"`
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
	st, err := m.state()
	if err == nil {
		var js []byte
		js, _ = json.Marshal(st)
		env := append(os.Environ(), masterStateEnv+"="+string(js))
		m.log.Info("master: running the new binary", "binary", m.exe)
		err = syscall.Exec(m.exe, os.Args, env)
	}
	m.log.Error("master keeps the old binary (its workers run the new one)", "err", err)
}

// state is what the master hands its next binary, every fd made to
// survive the execve.
func (m *master) state() (*masterState, error) {
	cfg, err := yaml.Marshal(m.cfg)
	if err != nil {
		return nil, err
	}
	st := &masterState{Config: cfg, Dir: m.dir, Admin: -1, Pids: m.pids, Retired: m.retired}
	// Not f.Fd(), which would put the socket, shared with the workers,
	// in blocking mode: their accepts would then block in the kernel.
	keep := func(f *os.File) (fd int, err error) {
		err = sockopt.WithFD(f, func(raw int) error {
			fd = raw
			_, err := unix.FcntlInt(uintptr(raw), unix.F_SETFD, 0)
			return err
		})
		return fd, err
	}
	for _, files := range m.files {
		fds := map[string]int{}
		for name, f := range files {
			if fds[name], err = keep(f); err != nil {
				return nil, err
			}
		}
		st.Files = append(st.Files, fds)
	}
	if m.admin.srv != nil {
		f, err := m.admin.srv.File()
		if err != nil {
			return nil, err
		}
		if st.Admin, err = keep(f); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// resumeMaster goes on as the master whose binary this process replaced:
// the same sockets, workers and admin endpoint.
func resumeMaster(path, pidFile, js string) error {
	os.Unsetenv(masterStateEnv)
	var st masterState
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return fmt.Errorf("%s: %w", masterStateEnv, err)
	}
	cfg, err := config.Parse("running configuration", st.Config)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m := &master{path: path, pidFile: pidFile, exe: exe, log: newLogger(cfg.Log), count: len(st.Pids), cfg: cfg,
		dir: st.Dir, pids: st.Pids, started: make([]time.Time, len(st.Pids)), exited: make(chan workerExit, 16)}
	for _, fds := range st.Files {
		files := map[string]*os.File{}
		for name, fd := range fds {
			syscall.CloseOnExec(fd)
			files[name] = os.NewFile(uintptr(fd), name)
		}
		m.files = append(m.files, files)
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
	for i, pid := range m.pids {
		m.started[i] = time.Now()
		go m.watch(i, pid)
	}
	for _, pid := range st.Retired {
		go m.reap(pid)
	}
	m.log.Info("master upgraded", "binary", exe, "pid", os.Getpid(), "workers", m.count)
	notify(m.log, sdnotify.Ready)
	return m.loop()
}

// watch reports the end of worker i's process pid, which the master may
// not have started (an upgrade's new worker; any worker after the
// master's own execve).
func (m *master) watch(i, pid int) {
	m.exited <- workerExit{index: i, pid: pid, err: waitEnd(pid)}
}

// reap waits for a retired worker, started by this process before its
// execve, to end, and reaps it: no Go code of the old binary is left to.
func (m *master) reap(pid int) {
	waitEnd(pid)
	m.log.Debug("retired worker process ended", "pid", pid)
	m.mu.Lock()
	m.retired = slices.DeleteFunc(m.retired, func(p int) bool { return p == pid })
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

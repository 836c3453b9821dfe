// The master's decisions with a fake in place of processes (fakeSys): no binary runs; each worker is an admin endpoint in this process, on the socket the master hands it.

package supervisor

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// fakeSys starts fake workers: each serves answer on the admin socket
// the master hands it. Processes end when the test says (end), timers
// fire when it says (fire), and its clock moves when it says (advance).
type fakeSys struct {
	tb     testing.TB
	answer func(i int, w http.ResponseWriter, r *http.Request) // a worker's admin endpoint

	mu       sync.Mutex
	clock    time.Time
	nextPid  int
	procs    map[int]chan error // each process's end, by pid
	starts   []State            // what each started worker read from its environment
	failNext int                // starts to fail
	timers   []timer
	execs    [][]string // the environment of each exec
}

type timer struct {
	d time.Duration
	f func()
}

func newFakeSys(tb testing.TB) *fakeSys {
	return &fakeSys{tb: tb, clock: time.Unix(1000, 0), nextPid: 100, procs: map[int]chan error{}}
}

// newProc is a process that runs until end.
func (s *fakeSys) newProc() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextPid++
	s.procs[s.nextPid] = make(chan error, 1)
	return s.nextPid
}

// end ends process pid with err.
func (s *fakeSys) end(pid int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[pid] <- err
}

func (s *fakeSys) startWorker(exe string, args []string, files map[string]*os.File, env []string, caps []uintptr) (int, <-chan error, error) {
	st, err := ReadState(environ(env))
	if err != nil {
		return 0, nil, err
	}
	s.mu.Lock()
	s.starts = append(s.starts, st)
	fail := s.failNext > 0
	if fail {
		s.failNext--
	}
	s.mu.Unlock()
	if fail {
		return 0, nil, fmt.Errorf("worker %d: exit status 1 before it served", st.Worker.index)
	}
	ln, err := net.FileListener(files[adminSocket])
	if err != nil {
		return 0, nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.answer(st.Worker.index, w, r) })}
	go srv.Serve(ln)
	s.tb.Cleanup(func() { srv.Close() })
	pid := s.newProc()
	return pid, s.procs[pid], nil
}

func (s *fakeSys) kill(pid int, sig syscall.Signal) error { return nil }

func (s *fakeSys) waitEnd(pid int) error {
	s.mu.Lock()
	c := s.procs[pid]
	s.mu.Unlock()
	return <-c
}

func (s *fakeSys) exec(exe string, args, env []string, caps []uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execs = append(s.execs, env)
	return fmt.Errorf("fake: no execve")
}

func (s *fakeSys) afterFunc(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timers = append(s.timers, timer{d, f})
}

func (s *fakeSys) now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock
}

func (s *fakeSys) advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock = s.clock.Add(d)
}

// fire runs the timers set so far and returns their delays.
func (s *fakeSys) fire() []time.Duration {
	s.mu.Lock()
	timers := s.timers
	s.timers = nil
	s.mu.Unlock()
	var out []time.Duration
	for _, t := range timers {
		out = append(out, t.d)
		t.f()
	}
	return out
}

// startCount is how many workers were started.
func (s *fakeSys) startCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.starts)
}

// masterYAML is a configuration of the listeners named, each on a free
// loopback port.
func masterYAML(tb testing.TB, names ...string) string {
	tb.Helper()
	var b strings.Builder
	b.WriteString("workers: 2\nlisteners:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  - name: %s\n    listen: %s\n    proxy: tcp\n    upstream: [127.0.0.1:9]\n    engine: copy\n", n, testenv.FreeAddr(tb))
	}
	return b.String()
}

// startMaster runs a master of two workers on the configuration yaml
// with s for processes, as runMaster would up to its loop: its sockets
// bound, each worker started.
func startMaster(tb testing.TB, s *fakeSys, yaml string) *master {
	tb.Helper()
	dir := tb.TempDir()
	tb.Setenv("TMPDIR", dir) // the directory of the workers' admin sockets
	path := filepath.Join(dir, "splicer.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	m := newMaster(path, "", "/usr/sbin/splicer", slog.New(slog.NewTextHandler(io.Discard, nil)), cfg, cfg.Workers.Count())
	m.sys = s
	if err := m.bind(cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		m.closeFiles(true)
		for _, g := range m.spread {
			g.Close()
		}
	})
	if err := m.serveAdmin(cfg, nil); err != nil {
		tb.Fatal(err)
	}
	if err := m.serveSockets(); err != nil {
		tb.Fatal(err)
	}
	for i := range m.count {
		if err := m.start(i); err != nil {
			tb.Fatal(err)
		}
	}
	return m
}

// nextExit is the next worker end the master is told of.
func nextExit(tb testing.TB, m *master) workerExit {
	tb.Helper()
	select {
	case e := <-m.exited:
		return e
	case <-time.After(10 * time.Second):
		tb.Fatal("no worker end reported")
		return workerExit{}
	}
}

func okAnswer(i int, w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }

// TestMasterStartsWorkers: each worker learns its place, its master
// and the master's socket service from its environment.
func TestMasterStartsWorkers(t *testing.T) {
	s := newFakeSys(t)
	s.answer = okAnswer
	m := startMaster(t, s, masterYAML(t, "a"))
	for i, st := range s.starts {
		if st.Role != Worker || st.Worker != (worker{i, 2}) || st.MasterPid != os.Getpid() || st.MasterSockets != filepath.Join(m.dir, socketServiceName) {
			t.Errorf("worker %d read %+v", i, st)
		}
	}
	if len(s.starts) != 2 || m.pids[0] == 0 || m.pids[1] == 0 {
		t.Errorf("%d workers started, pids %v; want 2", len(s.starts), m.pids)
	}
}

// TestMasterRestartDelay: a worker that dies within restartDelay of its
// start is restarted after restartDelay (a worker that cannot start does
// not spin); one that ran longer, at once; one that does not start, again
// after restartDelay.
func TestMasterRestartDelay(t *testing.T) {
	s := newFakeSys(t)
	s.answer = okAnswer
	m := startMaster(t, s, masterYAML(t, "a"))

	s.end(m.pids[1], fmt.Errorf("signal: killed"))
	m.workerEnded(nextExit(t, m))
	if d := s.fire(); len(d) != 1 || d[0] != restartDelay {
		t.Fatalf("a worker dead at once: restarts after %v, want [%v]", d, restartDelay)
	}
	if s.startCount() != 3 || s.starts[2].Worker != (worker{1, 2}) || m.pids[1] == 0 {
		t.Fatalf("worker 1 not restarted: starts %+v, pids %v", s.starts, m.pids)
	}

	s.advance(restartDelay + time.Second)
	old := m.pids[1]
	s.end(old, nil)
	m.workerEnded(nextExit(t, m))
	s.failNext = 1
	if d := s.fire(); len(d) != 1 || d[0] != 0 {
		t.Fatalf("a worker that ran %v: restarts after %v, want [0s]", restartDelay+time.Second, d)
	}
	if m.pids[1] != 0 {
		t.Fatalf("a worker that failed to start has pid %d", m.pids[1])
	}
	if d := s.fire(); len(d) != 1 || d[0] != restartDelay {
		t.Fatalf("a worker that did not start: tried again after %v, want [%v]", d, restartDelay)
	}
	if m.pids[1] == 0 || m.pids[1] == old || counterValue(m.restarts) != 2 {
		t.Errorf("worker 1 after its retry: pid %d (was %d), restarts counted %v; want a new pid, 2", m.pids[1], old, counterValue(m.restarts))
	}
}

// TestMasterReloadWorkerFails: the second worker refuses the reload.
// The first took the new file, so the master follows it: the added
// listener's socket stays for the first worker only, and the error names
// the worker that failed. When the first worker refuses, nothing
// changes.
func TestMasterReloadWorkerFails(t *testing.T) {
	for _, failing := range []int{0, 1} {
		t.Run(fmt.Sprintf("worker%d", failing), func(t *testing.T) {
			s := newFakeSys(t)
			s.answer = func(i int, w http.ResponseWriter, r *http.Request) {
				if i == failing {
					http.Error(w, "engine sockmap: no such thing", http.StatusUnprocessableEntity)
					return
				}
				fmt.Fprintln(w, "ok")
			}
			m := startMaster(t, s, masterYAML(t, "a"))
			if err := os.WriteFile(m.path, []byte(masterYAML(t, "a", "added")), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := m.reloadLogged("test")
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("worker %d", failing)) || !strings.Contains(err.Error(), "sockmap") {
				t.Fatalf("reload: %v; want worker %d's refusal", err, failing)
			}
			took := failing // the workers before the failing one
			if got := len(m.cfg.Listeners); (took > 0) != (got == 2) {
				t.Errorf("the master's configuration has %d listeners after %d worker(s) took the reload", got, took)
			}
			for i := range m.count {
				if has := m.files[i]["added"] != nil; has != (i < took) {
					t.Errorf("worker %d holds the added listener's socket: %v, want %v", i, has, i < took)
				}
			}
		})
	}
}

// TestMasterUpgradeRetiresWorkers: each worker hands over to a new
// process; the master then follows the new ones, keeps the old ones as
// retired until they end (never restarting them), and hands its
// successor binary the new pids and the retired ones in its state.
func TestMasterUpgradeRetiresWorkers(t *testing.T) {
	s := newFakeSys(t)
	s.answer = func(i int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upgrade" {
			fmt.Fprintf(w, "ok\nnew process %d serves; this one drains\n", s.newProc())
			return
		}
		fmt.Fprintln(w, "ok")
	}
	m := startMaster(t, s, masterYAML(t, "a"))
	old := append([]int(nil), m.pids...)
	if err := m.upgradeLogged("test"); err != nil {
		t.Fatal(err)
	}
	if m.pids[0] == old[0] || m.pids[1] == old[1] || len(m.retired) != 2 {
		t.Fatalf("after the upgrade: pids %v (were %v), retired %v", m.pids, old, m.retired)
	}

	s.end(old[0], nil) // a retired worker drained and ended
	m.workerEnded(nextExit(t, m))
	if len(m.retired) != 1 || m.retired[0] != old[1] {
		t.Errorf("retired after worker 0's old process ended: %v, want [%d]", m.retired, old[1])
	}

	if d := s.fire(); len(d) != 1 { // the master's own execve
		t.Fatalf("timers after the upgrade: %v, want the master's execve", d)
	}
	if s.startCount() != 2 {
		t.Errorf("%d workers started: a retired one was restarted", s.startCount())
	}
	if len(s.execs) != 1 {
		t.Fatalf("%d execve, want 1", len(s.execs))
	}
	st, err := ReadState(environ(s.execs[0]))
	if err != nil || st.Role != ResumedMaster {
		t.Fatalf("the successor reads %+v, %v", st, err)
	}
	if fmt.Sprint(st.Master.Pids) != fmt.Sprint(m.pids) || fmt.Sprint(st.Master.Retired) != fmt.Sprint([]int{old[1]}) || len(st.Master.Files) != 2 || st.Master.Files[0]["a"] == 0 {
		t.Errorf("handed over: pids %v retired %v files %v; want pids %v retired [%d], a socket per worker",
			st.Master.Pids, st.Master.Retired, st.Master.Files, m.pids, old[1])
	}
}

// TestMasterUpgradeWorkerFails: the second worker's upgrade fails: the
// first runs its new process, the second its old one, and the master
// keeps its binary.
func TestMasterUpgradeWorkerFails(t *testing.T) {
	s := newFakeSys(t)
	s.answer = func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 1 {
			http.Error(w, "upgrade failed: exit status 1", http.StatusUnprocessableEntity)
			return
		}
		fmt.Fprintf(w, "ok\nnew process %d serves; this one drains\n", s.newProc())
	}
	m := startMaster(t, s, masterYAML(t, "a"))
	old := append([]int(nil), m.pids...)
	err := m.upgradeLogged("test")
	if err == nil || !strings.Contains(err.Error(), "worker 1") {
		t.Fatalf("upgrade: %v; want worker 1's failure", err)
	}
	if m.pids[0] == old[0] || m.pids[1] != old[1] || fmt.Sprint(m.retired) != fmt.Sprint([]int{old[0]}) {
		t.Errorf("pids %v (were %v), retired %v; want worker 0 new, worker 1 as it was, [%d] retired", m.pids, old, m.retired, old[0])
	}
	if d := s.fire(); len(d) != 0 {
		t.Errorf("timers %v: the master replaces its binary after a failed upgrade", d)
	}
}

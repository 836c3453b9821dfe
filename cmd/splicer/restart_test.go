// Reload and hitless upgrade of a running 'splicer run': SIGHUP adds and removes listeners while a pair runs on, a broken file changes nothing, and an upgrade hands every socket to a new process without refusing a connection.

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
)

// site is where a daemon test runs: on loopback, or in the lab's namespaces.
type site struct {
	fwdIP, upIP string // the forwarder's listening IP, the upstream's
	adminAddr   string
	listenUp    func(addr string) (net.Listener, error)
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	command     func(ctx context.Context, name string, args ...string) *exec.Cmd
	admin       *http.Client
	readable    bool // the daemon's files are readable by any user
}

func loopbackSite(tb testing.TB) *site {
	return &site{fwdIP: "127.0.0.1", upIP: "127.0.0.1", adminAddr: freeLoopback(tb),
		listenUp: func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) },
		dial:     (&net.Dialer{}).DialContext,
		command:  exec.CommandContext,
		admin:    &http.Client{Timeout: 90 * time.Second},
	}
}

func labSite(l *lab.Lab) *site {
	c := adminClient(l)
	c.Timeout = 90 * time.Second
	return &site{fwdIP: "10.99.1.1", upIP: "10.99.2.2", adminAddr: adminAddr,
		listenUp: func(addr string) (net.Listener, error) { return l.Server.Listen("tcp", addr) },
		dial:     l.Client.Dial, command: l.Fwd.Command, admin: c}
}

// handedOut are the addresses freeLoopback has returned in this test
// binary: the kernel may give the same free port to two calls in a row
// (seen in CI: a test's "added" listener got its "keep" listener's port,
// so the reload that was to add it was refused as a duplicate).
var handedOut sync.Map

// freeLoopback is a loopback address with a port nothing listens on, and
// one it has not returned before.
func freeLoopback(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
	tb.Fatal("no loopback port not handed out before in 100 tries")
	return ""
}

// upstream serves the origin's protocol proto (origin.Echo, origin.HTTP)
// at the site's upstream IP and returns its address.
func (s *site) upstream(tb testing.TB, proto origin.Proto) string {
	tb.Helper()
	ln, err := s.listenUp(net.JoinHostPort(s.upIP, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	origintest.Serve(tb, ln, proto)
	return ln.Addr().String()
}

// daemon is a running 'splicer run' process.
type daemonProc struct {
	cmd     *exec.Cmd
	exited  chan error
	logFile string
	pidFile string
}

// logs is what the daemon and its successor logged so far. They log to a
// file, not a pipe to this process: the successor of an upgrade outlives
// the process the test started, and a pipe would keep Wait waiting.
func (d *daemonProc) logs() string {
	b, _ := os.ReadFile(d.logFile)
	return string(b)
}

// startRun runs the binary with the configuration text cfg and waits for
// its admin endpoint. Cleanup stops whichever process the pid file names.
func (s *site) startRun(tb testing.TB, cfg string) *daemonProc {
	tb.Helper()
	dir := tb.TempDir()
	if s.readable {
		os.Chmod(filepath.Dir(dir), 0o755)
		os.Chmod(dir, 0o755)
	}
	cfgPath := filepath.Join(dir, "splicer.yaml")
	writeFile(tb, cfgPath, []byte(cfg))
	d := &daemonProc{logFile: filepath.Join(dir, "splicer.log"), exited: make(chan error, 1), pidFile: filepath.Join(dir, "splicer.pid")}
	d.cmd = s.command(context.Background(), splicerBinary(tb), "run", "--config", cfgPath, "--pid-file", d.pidFile)
	// A master's directory of worker sockets goes with the test, even
	// when the master is killed.
	d.cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	logFile, err := os.OpenFile(d.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close()
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if err := d.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	tb.Cleanup(func() {
		if tb.Failed() {
			d.dumpGoroutines()
		}
		d.stopPidFile()
		d.cmd.Process.Kill()
		if tb.Failed() {
			tb.Logf("splicer log:\n%s", d.logs())
		}
	})
	waitUntil(tb, "the admin endpoint", d.exited, func() bool { return s.adminOK("GET", "/healthz") == nil })
	return d
}

// startRunReadable is startRun with the configuration readable by any
// user (for a daemon that drops to one).
func (s *site) startRunReadable(tb testing.TB, cfg string) *daemonProc {
	tb.Helper()
	s.readable = true
	return s.startRun(tb, cfg)
}

// configPath is the file the daemon was started with.
func (d *daemonProc) configPath() string { return d.cmd.Args[len(d.cmd.Args)-3] }

// pid is the pid the pid file names, or 0.
func (d *daemonProc) pid() int {
	b, err := os.ReadFile(d.pidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// dumpGoroutines has the process the test started, if it still runs,
// write its goroutines to the log and exit (SIGQUIT), so that a failed
// test shows where a process that should have stopped waits.
func (d *daemonProc) dumpGoroutines() {
	if d.cmd.Process.Signal(syscall.SIGQUIT) != nil {
		return // gone already
	}
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
	}
}

// stopPidFile terminates the process the pid file names (the new process
// of an upgrade is not the test's child) and waits for it to go.
func (d *daemonProc) stopPidFile() {
	pid := d.pid()
	if pid <= 0 || pid == d.cmd.Process.Pid {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(25 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// adminOK sends a request to the admin endpoint and wants 200.
func (s *site) adminOK(method, path string) error {
	req, _ := http.NewRequest(method, "http://"+s.adminAddr+path, nil)
	resp, err := s.admin.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// splicedBy reports whether /flows shows a pair of listener engine spliced
// by that engine.
func (s *site) splicedBy(engine string) bool {
	return s.findFlow(func(f map[string]any) bool {
		return f["listener"] == engine && f["engine"] == engine && f["state"] == "spliced"
	}) != nil
}

// ping opens a connection through addr and echoes one short message.
func (s *site) ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err == nil && string(got) != "ping" {
		err = fmt.Errorf("echo %q", got)
	}
	return err
}

// transfer is a long echo through the forwarder: size bytes written, and
// read back and compared, in the background.
type transfer struct {
	conn net.Conn
	done chan error
}

func (s *site) startTransfer(tb testing.TB, addr string, size int) *transfer {
	tb.Helper()
	c, err := s.dial(context.Background(), "tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	t := &transfer{conn: c, done: make(chan error, 1)}
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(data)
	want := sha256.Sum256(data)
	go func() {
		// Written in pieces with pauses, so the transfer outlasts the
		// reload or upgrade that the test performs meanwhile.
		for off := 0; off < size; off += 1 << 20 {
			if _, err := c.Write(data[off:min(off+1<<20, size)]); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		h := sha256.New()
		n, err := io.Copy(h, c)
		switch {
		case err != nil:
			t.done <- fmt.Errorf("after %d bytes: %w", n, err)
		case n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]):
			t.done <- fmt.Errorf("got %d bytes back (want %d), sha256 equal: %v", n, size, bytes.Equal(h.Sum(nil), want[:]))
		default:
			t.done <- nil
		}
	}()
	return t
}

func (t *transfer) wait(tb testing.TB, within time.Duration) {
	tb.Helper()
	select {
	case err := <-t.done:
		if err != nil {
			tb.Fatalf("transfer: %v", err)
		}
	case <-time.After(within):
		tb.Fatalf("transfer not done after %v", within)
	}
}

// pinger opens rate connections per second through addr until stopped,
// counting what was served and what failed.
type pinger struct {
	served, failed atomic.Int64
	firstErr       atomic.Value
	stop           chan struct{}
	wg             sync.WaitGroup
}

func (s *site) startPinger(addr string, rate int) *pinger {
	p := &pinger{stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				if err := s.ping(addr); err != nil {
					p.failed.Add(1)
					p.firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				p.served.Add(1)
			}()
		}
	}()
	return p
}

func (p *pinger) finish(tb testing.TB) {
	tb.Helper()
	close(p.stop)
	p.wg.Wait()
	if n := p.failed.Load(); n > 0 {
		tb.Errorf("%d of %d connections failed (first: %v)", n, n+p.served.Load(), p.firstErr.Load())
	}
	if p.served.Load() == 0 {
		tb.Errorf("no connection was served")
	}
}

func listenerYAML(name, listen, upstream, engine string) string {
	return fmt.Sprintf("  - name: %s\n    listen: %s\n    proxy: tcp\n    upstream: [%s]\n    engine: %s\n", name, listen, upstream, engine)
}

func daemonYAML(s *site, grace string, listeners ...string) string {
	return fmt.Sprintf("admin: %s\nshutdown_timeout: %s\nlog: {level: debug}\nlisteners:\n%s", s.adminAddr, grace, strings.Join(listeners, ""))
}

// TestRunReloadOnSIGHUP: a SIGHUP adds a listener and removes another while
// a transfer on a third runs on; a broken file on SIGHUP (and through
// 'splicer reload') is refused with its errors, and everything keeps
// running.
func TestRunReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	up := s.upstream(t, origin.Echo)
	keep, gone, added := freeLoopback(t), freeLoopback(t), freeLoopback(t)
	d := s.startRun(t, daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy"), listenerYAML("gone", gone, up, "pipe")))
	tr := s.startTransfer(t, keep, 48<<20)

	writeFile(t, d.configPath(), []byte(daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy"), listenerYAML("added", added, up, "pipe"))))
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the added listener to serve", d.exited, func() bool { return s.ping(added) == nil })
	if err := s.ping(gone); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the removed listener: %v, want connection refused", err)
	}

	// A broken file: refused with its errors, nothing changes.
	writeFile(t, d.configPath(), []byte(daemonYAML(s, "10s", listenerYAML("keep", keep, up, "copy"))+"    conect_timeout: 1s\n"))
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload's log lines", d.exited, func() bool {
		return strings.Contains(d.logs(), `unknown key \"conect_timeout\"`)
	})
	_, stderr, code := splicer(t, "reload", "--admin", s.adminAddr)
	if code != 1 || !strings.Contains(stderr, "reload refused") || !strings.Contains(stderr, "conect_timeout") {
		t.Errorf("splicer reload of a broken file: exit %d, stderr %q; want 1 and the error", code, stderr)
	}
	if err := s.ping(added); err != nil {
		t.Errorf("after a refused reload the added listener: %v", err)
	}
	tr.wait(t, 60*time.Second)
	if err := s.ping(keep); err != nil {
		t.Errorf("the kept listener after the transfer: %v", err)
	}
	if !strings.Contains(d.logs(), "level=ERROR msg=\"reload refused: configuration error\"") {
		t.Errorf("log lacks the refused reload")
	}
}

// TestRunUpgradeLoopback: 'splicer upgrade' hands the sockets of a copy and
// a pipe listener to a new process while a transfer runs on each and 100
// new connections a second arrive: none is refused, both transfers finish
// intact in the old process, which then exits 0.
func TestRunUpgradeLoopback(t *testing.T) {
	t.Parallel()
	s := loopbackSite(t)
	testUpgrade(t, s, []string{"copy", "pipe"})
}

// TestRunUpgradeInLab: the same for the kernel engines, in the lab.
func TestRunUpgradeInLab(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	testUpgrade(t, labSite(l), []string{"sockmap", "ip"})
}

func testUpgrade(t *testing.T, s *site, engines []string) {
	up := s.upstream(t, origin.Echo)
	var listeners []string
	addrs := map[string]string{}
	for i, e := range engines {
		addrs[e] = net.JoinHostPort(s.fwdIP, strconv.Itoa(17100+i))
		if s.fwdIP == "127.0.0.1" {
			addrs[e] = freeLoopback(t)
		}
		listeners = append(listeners, listenerYAML(e, addrs[e], up, e))
	}
	d := s.startRun(t, daemonYAML(s, "60s", listeners...))
	oldPid := d.pid()
	var transfers []*transfer
	var pingers []*pinger
	for _, e := range engines {
		transfers = append(transfers, s.startTransfer(t, addrs[e], 64<<20))
		pingers = append(pingers, s.startPinger(addrs[e], 100))
	}
	// Each transfer is spliced by its listener's engine before the upgrade.
	waitUntil(t, "every transfer spliced by its engine", d.exited, func() bool {
		for _, e := range engines {
			if !s.splicedBy(e) {
				return false
			}
		}
		return true
	})
	if out, err := s.command(context.Background(), splicerBinary(t), "upgrade", "--admin", s.adminAddr).CombinedOutput(); err != nil {
		t.Fatalf("splicer upgrade: %v: %s", err, out)
	}
	time.Sleep(time.Second)
	for _, p := range pingers {
		p.finish(t)
	}
	for _, tr := range transfers {
		tr.wait(t, 90*time.Second)
	}
	waitExitZero(t, "the old process, its pairs finished", d.exited, 30*time.Second)
	if pid := d.pid(); pid == 0 || pid == oldPid {
		t.Fatalf("pid file names %d after the upgrade (old %d)", pid, oldPid)
	}
	for _, e := range engines {
		if err := s.ping(addrs[e]); err != nil {
			t.Errorf("%s listener of the new process: %v", e, err)
		}
	}
	if err := s.adminOK("GET", "/healthz"); err != nil {
		t.Errorf("admin endpoint of the new process: %v", err)
	}
	for _, want := range []string{"upgrade: new process serves", "took over from the previous process", "upgraded: draining"} {
		if !strings.Contains(d.logs(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// Package bench reproduces the papers' experiments: splicer's engines and peer forwarders side by side in one lab, one run.
//
// An Env builds the lab (client, forwarder and server namespaces), starts the
// built-in origin in the server namespace, one splicer process with a
// listener per engine and service in the forwarder namespace, and the peers a
// user would pick instead (kernel routing, HAProxy with and without splice,
// socat). Every one of them is a Target the client namespace dials; the
// experiments drive load at the targets and read CPU time around each run.
// Without root, the Env runs on loopback with the engines that need no
// privileges, and says what it skipped.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// Service is an origin protocol that targets forward to.
type Service int

const (
	Sink Service = iota
	Source
	Echo
	HTTP
	// Sockperf is served by a sockperf server (sockperf sr), not the origin.
	Sockperf
	// Iperf3 is served by an iperf3 server (iperf3 -s), not the origin.
	Iperf3
	numServices
)

// numOriginServices are the services the built-in origin serves.
const numOriginServices = Sockperf

var serviceNames = [...]string{"sink", "source", "echo", "http", "sockperf", "iperf3"}

func (s Service) String() string { return serviceNames[s] }

var serviceProtos = [numOriginServices]origin.Proto{origin.Sink, origin.Source, origin.Echo, origin.HTTP}

// Engines are splicer's engines as targets, shallow to deep; Peers are the
// forwarders they are compared with, in table order.
var (
	Engines = []string{"copy", "pipe", "sockmap", "ip"}
	Peers   = []string{"route", "haproxy", "haproxy-splice", "socat"}
)

// Target is one forwarder under test: a splicer engine or a peer.
type Target struct {
	Name string
	// Peer is true for the forwarders splicer is compared with.
	Peer bool
	// Auto is true for splicer's engine auto, which picks the engine of
	// each pair itself: its runs count whichever engine /flows shows.
	Auto bool
	// Unavailable, when set, says why the target cannot run here.
	Unavailable string
	addrs       [numServices]string
	// lateAddr is an engine's sink listener that keeps pairs in control
	// mode for lateSplice before splicing them, for throughput traces.
	lateAddr string
	// webAddr is an engine's HTTP forward proxy (web), in front of the
	// origin's http service; switchAddr is an engine's http-reverse
	// listener or a peer's HTTP-mode frontend (switch), in front of the
	// switch experiments' origin (addressing.switchOrigin), or for route
	// that origin itself.
	webAddr, switchAddr string
	pids                func() []int
}

// Addr is the address the client dials to reach service s through t.
func (t *Target) Addr(s Service) string { return t.addrs[s] }

// Pids are the processes whose CPU time is the forwarder's own.
func (t *Target) Pids() []int {
	if t.pids == nil {
		return nil
	}
	return t.pids()
}

// Options configure an Env.
type Options struct {
	// Splicer is the splicer binary run as the forwarder (default: this
	// executable).
	Splicer string
	// Loopback forces the unprivileged loopback mode.
	Loopback bool
	// Pin is Settings.Pin, known when the peers start: under it HAProxy
	// serves the HTTP switch with as many threads as the forwarders get
	// CPUs (splitCPUs), as splicer's GOMAXPROCS follows them.
	Pin bool
	// CC is the TCP congestion control every lab namespace uses (lab.SetCC);
	// "": the host's default, which a namespace takes when it is made.
	CC string
	// Log receives the harness's progress; splicer's own log goes to
	// LogDir/splicer.log.
	Log *slog.Logger
}

// Env is a running experiment environment.
type Env struct {
	Targets []*Target
	// Lab is nil in loopback mode.
	Lab *lab.Lab
	// Client is where load generators dial from.
	Client host
	// server is where the origin and the sockperf server run.
	server host
	// SwitchPeers are targets measured only as HTTP switches (wrk):
	// splicer's http-reverse with engine auto, nginx, and HAProxy with a
	// 256 KiB buffer.
	SwitchPeers []*Target
	// Auto is splicer's tcp listeners with no engine (auto, default
	// promote thresholds), the "auto" of SwitchPeers, for throughput's
	// rows: nil where ip cannot run.
	Auto *Target
	// Skipped says what loopback mode left out and why.
	Skipped []string
	// AdminAddr is splicer's admin endpoint, dialled from Client's side.
	AdminAddr string
	fwd       host
	// splicer is the binary the forwarder runs, for extra processes.
	splicer string
	// ccFwd and ccServer are the forwarder's and the server's default TCP
	// congestion control (congestion.go), "" if unknown.
	ccFwd, ccServer string
	// ccChosen: Options.CC set them.
	ccChosen bool
	// addrs is where the lab's hosts listen.
	addrs addressing
	// SwitchOrigin says what serves the HTTP switch experiments: nginx, or
	// the built-in origin and why.
	SwitchOrigin string
	// objectDir is where the nginx origin's objects are, "" without it;
	// originPids are its processes, pinned with the built-in origin.
	objectDir  string
	originPids []int
	origin     *origin.Server
	// tlsOrigin is where the nginx origin serves the same objects over
	// TLS with the certificate of tlsFiles, "" without it.
	tlsOrigin string
	tlsFiles  *tlsFiles
	// sockperfOnce starts the sockperf server at most once; sockperfErr
	// says why it could not.
	sockperfOnce sync.Once
	sockperfErr  error
	// iperf3Once and iperf3Err are the same for the iperf3 server.
	iperf3Once sync.Once
	iperf3Err  error
	// adminClient talks to splicer's admin endpoints (see admin).
	adminClient *http.Client
	adminOnce   sync.Once
	dir         string
	procs       []*exec.Cmd
	cancel      context.CancelFunc
	log         *slog.Logger
}

// addressing of one Env: where things listen.
type addressing struct {
	fwd, server string
	// switchOrigin is the origin the HTTP switches (http-reverse, HAProxy
	// and nginx in HTTP mode) and route's HTTP rows send requests to: the
	// nginx origin, or the built-in origin's http service without it.
	switchOrigin string
}

// originAddr is where the built-in origin's service s listens.
func (a addressing) originAddr(s Service) string {
	return net.JoinHostPort(a.server, strconv.Itoa(originPort+int(s)))
}

// Port blocks: origin services at 5001+s, the sockperf and iperf3
// servers at 5001+Sockperf and 5001+Iperf3; each target at base+s.
const originPort = 5001

// lateSplice is when the late listeners splice; lateOffset is their port
// offset within an engine's block.
const (
	lateSplice = time.Second
	lateOffset = 10
)

// webOffset and switchOffset are the port offsets of an engine's HTTP
// forward proxy and of its (or HAProxy's) HTTP switch.
const (
	webOffset    = 20
	switchOffset = 21
)

var targetPorts = map[string]int{
	"copy": 7100, "pipe": 7200, "sockmap": 7300, "ip": 7400, "auto": 7500, "auto-workers": 7600,
	"haproxy": 8100, "haproxy-splice": 8200, "socat": 8300, "nginx": 8400,
	"haproxy-buf256k": 8500,
}

// New builds the environment. Close it, also on interrupt.
func New(opts Options) (*Env, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Splicer == "" {
		// The daemon is installed beside splicer-bench.
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Splicer = filepath.Join(filepath.Dir(exe), "splicer")
		if _, err := os.Stat(opts.Splicer); err != nil {
			return nil, fmt.Errorf("the splicer binary is not beside %s: %w", exe, err)
		}
	}
	e := &Env{log: opts.Log}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	dir, err := os.MkdirTemp("", "splicer-bench-")
	if err != nil {
		return nil, err
	}
	e.dir = dir
	if err := e.build(ctx, opts); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) build(ctx context.Context, opts Options) error {
	a := addressing{fwd: "127.0.0.1", server: "127.0.0.1"}
	var server host = local{}
	e.Client, e.fwd = local{}, local{}
	if !opts.Loopback && os.Geteuid() == 0 {
		l, err := lab.New(lab.DefaultConfig())
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		e.Lab = l
		// The forwarder namespace dials the origin tens of thousands of
		// times a minute (splice-cost and memory open thousands of pairs
		// per run) and is the side that closes first, so its upstream
		// sockets sit in TIME_WAIT; the ip engine also reserves its
		// engines.ip.local_ports (20,000) out of the ephemeral ports.
		// Without reuse the third run of splice-cost failed with "cannot
		// assign requested address". A busy forwarder is tuned so too.
		if err := l.Fwd.Sysctl("net.ipv4.tcp_tw_reuse", "1"); err != nil {
			return err
		}
		if opts.CC != "" {
			if err := l.SetCC(opts.CC); err != nil {
				return fmt.Errorf("--cc %s: %w", opts.CC, err)
			}
			e.ccChosen = true
		}
		e.Client, e.fwd, server = l.Client, l.Fwd, l.Server
		a = addressing{fwd: l.Cfg.FwdClient.Addr().String(), server: l.Cfg.Server.Addr().String()}
	} else {
		if opts.CC != "" {
			return errors.New("--cc sets the lab's namespaces: it needs root and no --loopback")
		}
		e.Skipped = append(e.Skipped, "lab, route, sockmap, ip: need root (network namespaces, BPF); ran on loopback")
	}
	e.splicer, e.server = opts.Splicer, server
	if err := e.startOrigin(server, a); err != nil {
		return err
	}
	a.switchOrigin, e.SwitchOrigin = e.startNginxOrigin(ctx, a)
	e.addrs = a
	e.addRoute(a)
	if err := e.startSplicer(ctx, opts.Splicer, a); err != nil {
		return err
	}
	e.startWorkersSwitch(ctx, a, opts.Pin)
	e.startPeers(ctx, a, opts.Pin)
	e.ccFwd, e.ccServer = e.readCC(ctx)
	return nil
}

func (e *Env) startOrigin(server host, a addressing) error {
	e.origin = origin.New(nil)
	for s := Service(0); s < numOriginServices; s++ {
		ln, err := server.Listen("tcp", a.originAddr(s))
		if err != nil {
			return fmt.Errorf("origin %s: %w", s, err)
		}
		if err := e.origin.Serve(serviceProtos[s], ln); err != nil {
			return err
		}
	}
	return nil
}

// addRoute adds the kernel-routing baseline: the client dials the server,
// its HTTP rows included (the origin reached with no proxy between: for
// small objects the most any HTTP switch here can deliver).
func (e *Env) addRoute(a addressing) {
	t := &Target{Name: "route", Peer: true}
	if e.Lab == nil {
		t.Unavailable = "needs the lab (root)"
	}
	for s := Service(0); s < numServices; s++ {
		t.addrs[s] = a.originAddr(s)
	}
	t.switchAddr = a.switchOrigin
	e.Targets = append(e.Targets, t)
}

// startSplicer runs one splicer process with a listener per engine and
// service, and makes a target of each engine this host can run.
func (e *Env) startSplicer(ctx context.Context, bin string, a addressing) error {
	probe := all.Build(defaultEngines(), e.log)
	probe.Close()
	var targets []*Target
	cfg := "admin: " + net.JoinHostPort(a.fwdAdmin(), "9901") + "\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nlisteners:\n"
	for _, name := range Engines {
		t := &Target{Name: name}
		targets = append(targets, t)
		switch {
		case !slices.Contains(all.Names(), name):
			t.Unavailable = "not built yet"
			continue
		case probe.Reason(name) != "":
			t.Unavailable = probe.Reason(name)
			continue
		}
		for s := Service(0); s < numServices; s++ {
			t.addrs[s] = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+int(s)))
			cfg += fmt.Sprintf("  - {name: %s-%s, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s}\n",
				name, s, t.addrs[s], a.originAddr(s), name)
		}
		t.lateAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+lateOffset))
		cfg += fmt.Sprintf("  - {name: %s-late, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s, splice_after: %v}\n",
			name, t.lateAddr, a.originAddr(Sink), name, lateSplice)
		cfg += httpListeners(t, name, a)
	}
	auto, autoCfg := autoSwitch(probe, a)
	cfg += autoCfg
	listening := slices.Clone(targets)
	if auto != nil {
		cfg += autoListeners(auto, a)
		listening = append(listening, auto)
	}
	path := filepath.Join(e.dir, "splicer.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	cmd, err := e.start(ctx, e.fwd, "splicer", bin, "run", "--config", path)
	if err != nil {
		return err
	}
	pids := func() []int { return []int{cmd.Process.Pid} }
	for _, t := range listening {
		t.pids = pids
		if t.Unavailable == "" {
			if err := e.waitListening(t.addrs[Sink]); err != nil {
				return fmt.Errorf("splicer did not start (see %s): %w", filepath.Join(e.dir, "splicer.log"), err)
			}
		}
	}
	e.AdminAddr = net.JoinHostPort(a.fwdAdmin(), "9901")
	e.Targets = append(e.Targets, targets...)
	if auto != nil {
		e.Auto = auto
		e.SwitchPeers = append(e.SwitchPeers, auto)
	}
	return nil
}

// autoSwitch is the http-reverse listener with engine auto, the engine a
// user gets by default (ip first, then pipe, sockmap, copy: engine/all),
// for the HTTP rows; throughput measures its tcp listeners too
// (autoListeners), where it promotes pairs from copy. Nil where ip
// cannot run (auto is then pipe, which has its own rows).
func autoSwitch(probe *all.Set, a addressing) (*Target, string) {
	if probe.Reason("ip") != "" || !slices.Contains(all.Names(), "ip") {
		return nil, ""
	}
	t := &Target{Name: "auto"}
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts["auto"]+switchOffset))
	return t, fmt.Sprintf("  - {name: auto-switch, listen: %q, proxy: http-reverse, engine: auto, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
		t.switchAddr, a.switchOrigin)
}

// autoListeners configures t's tcp listener per service as a user's
// default one is: no engine (auto) and the default promote thresholds,
// so a pair starts on copy and moves to ip past 192 KiB or 200 ms.
func autoListeners(t *Target, a addressing) string {
	t.Auto = true
	var cfg string
	for s := Service(0); s < numServices; s++ {
		t.addrs[s] = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts["auto"]+int(s)))
		cfg += fmt.Sprintf("  - {name: auto-%s, listen: %q, upstream: [%q], max_connections: 0, idle_timeout: 0s}\n",
			s, t.addrs[s], a.originAddr(s))
	}
	return cfg
}

// httpListeners configures an engine's HTTP forward proxy (the cache off,
// CONNECT allowed to the origin's http port) and its http-reverse switch
// with one pool, the switch experiments' origin.
func httpListeners(t *Target, name string, a addressing) string {
	t.webAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+webOffset))
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+switchOffset))
	return fmt.Sprintf("  - {name: %s-web, listen: %q, proxy: http-forward, engine: %s, idle_timeout: 0s, http: {connect_ports: [%d], cache_bytes: 0}}\n",
		name, t.webAddr, name, originPort+int(HTTP)) +
		fmt.Sprintf("  - {name: %s-switch, listen: %q, proxy: http-reverse, engine: %s, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
			name, t.switchAddr, name, a.switchOrigin)
}

// fwdAdmin is where splicer's admin endpoint listens: loopback of the
// forwarder host, reached through the forwarder's namespace.
func (a addressing) fwdAdmin() string { return "127.0.0.1" }

// start runs a long-lived process on h, its output in the Env's directory.
func (e *Env) start(ctx context.Context, h host, logName, name string, args ...string) (*exec.Cmd, error) {
	cmd := h.Command(ctx, name, args...)
	out, err := os.Create(filepath.Join(e.dir, logName+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { cmd.Wait(); out.Close() }()
	e.procs = append(e.procs, cmd)
	return cmd, nil
}

// startListening runs name as start does and waits until addr answers.
// cmd is the started process, also when it did not come to listen; the
// error then says so with the end of its log, on one line.
func (e *Env) startListening(ctx context.Context, h host, logName, addr, name string, args ...string) (*exec.Cmd, error) {
	cmd, err := e.start(ctx, h, logName, name, args...)
	if err != nil {
		return nil, err
	}
	if err := e.waitListening(addr); err != nil {
		return cmd, fmt.Errorf("%s did not start: %v: %s", name, err, strings.Join(strings.Fields(e.LogTail(logName)), " "))
	}
	return cmd, nil
}

// waitListening dials addr from the client side until it answers.
func (e *Env) waitListening(addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := e.Client.Dialer()(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Available returns the targets that can run here, engines first.
func (e *Env) Available() []*Target {
	var out []*Target
	for _, t := range e.Targets {
		if t.Unavailable == "" {
			out = append(out, t)
		}
	}
	return out
}

// Target returns the named target, or nil.
func (e *Env) Target(name string) *Target {
	for _, t := range e.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Dial is the client's dialer.
func (e *Env) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return e.Client.Dialer()(ctx, network, addr)
}

// Close stops every process and removes the lab.
func (e *Env) Close() error {
	e.cancel()
	for _, c := range e.procs {
		if c.Process != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			c.Process.Kill()
		}
	}
	var errs []error
	if e.origin != nil {
		errs = append(errs, e.origin.Close())
	}
	if e.Lab != nil {
		errs = append(errs, e.Lab.Close())
	}
	if e.dir != "" && os.Getenv("SPLICER_BENCH_KEEP") == "" {
		os.RemoveAll(e.dir)
	}
	return errors.Join(errs...)
}

// LogTail returns the end of a process's log, for error messages.
func (e *Env) LogTail(name string) string {
	f, err := os.Open(filepath.Join(e.dir, name+".log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	if st.Size() > 2000 {
		f.Seek(-2000, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// connrate's stages: a fresh lab with its own origin, and in it the forwarders of some connrate targets (one splicer, one HAProxy, one nginx process).

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/splicer/splicer/lab"
)

// connSpec is one connrate target: a listener kind of a forwarder, or the
// origin itself (via "").
type connSpec struct {
	name string
	// via is the forwarder: "splicer", "haproxy", "nginx", or "" for
	// route (no proxy: kernel routing to the origin).
	via string
	// proxy is the listener kind: splicer's tcp, http-reverse or
	// http-forward; HAProxy's tcp or http; nginx's stream or http.
	proxy string
	// engine is a splicer listener's engine.
	engine string
	// port is the HTTP side's; a byte forwarder has its echo listener at
	// port+connEchoOffset for the plain TCP points.
	port int
}

// connEchoOffset is the port offset of a byte forwarder's listener in
// front of the origin's echo.
const connEchoOffset = 50

// connAdmin is the admin endpoint of connrate's splicer processes: apart
// from the Env's own, which shares loopback with it without the lab.
const connAdmin = "127.0.0.1:9902"

// forwardsBytes: the target relays TCP and so also carries the plain TCP
// connect/send/close points.
func (c connSpec) forwardsBytes() bool {
	return c.via == "" || c.proxy == "tcp" || c.proxy == "stream"
}

// connSpecs are connrate's targets in table order: splicer's tcp listener
// per engine and auto, its HTTP proxies with engine auto, HAProxy and
// nginx in both of their modes, and the origin with no proxy.
var connSpecs = []connSpec{
	{"copy", "splicer", "tcp", "copy", 9100},
	{"pipe", "splicer", "tcp", "pipe", 9101},
	{"sockmap", "splicer", "tcp", "sockmap", 9102},
	{"ip", "splicer", "tcp", "ip", 9103},
	{"auto", "splicer", "tcp", "auto", 9104},
	{"auto-reverse", "splicer", "http-reverse", "auto", 9105},
	{"auto-forward", "splicer", "http-forward", "auto", 9106},
	{"haproxy", "haproxy", "tcp", "", 9110},
	{"haproxy-http", "haproxy", "http", "", 9111},
	{"nginx-stream", "nginx", "stream", "", 9120},
	{"nginx", "nginx", "http", "", 9121},
	{"route", "", "", "", 0},
}

// nginxStreamModule is where Debian's libnginx-mod-stream puts nginx's
// stream module, which nginx-light does not build in.
const nginxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// newConnStage builds a stage for connrate: with the lab, fresh namespaces
// (no TIME_WAIT, reserved port or table of an earlier stage in them) with
// the built-in origin and the nginx origin serving sizes; without it,
// loopback and e's origin. The client and forwarder namespaces reuse
// TIME_WAIT ports (tcp_tw_reuse 1), as a busy forwarder and a load
// generator's host are tuned. Close it.
func (e *Env) newConnStage(ctx context.Context, sizes []int64) (*Env, error) {
	return e.newStage(ctx, "connrate", sizes)
}

// newStage builds a stage as newConnStage does, its files in a directory
// named after the experiment.
func (e *Env) newStage(ctx context.Context, experiment string, sizes []int64) (*Env, error) {
	st := &Env{log: e.log, splicer: e.splicer, ccFwd: e.ccFwd, ccServer: e.ccServer, ccChosen: e.ccChosen}
	_, st.cancel = context.WithCancel(context.Background())
	dir, err := os.MkdirTemp(e.dir, experiment+"-")
	if err != nil {
		return nil, err
	}
	// nginx's workers run as nobody and reach their files through it.
	os.Chmod(dir, 0o755)
	st.dir = dir
	if err := st.buildConnStage(ctx, e, sizes); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func (st *Env) buildConnStage(ctx context.Context, e *Env, sizes []int64) error {
	if e.Lab == nil {
		st.Client, st.fwd, st.server = local{}, local{}, local{}
		st.addrs, st.SwitchOrigin, st.objectDir = e.addrs, e.SwitchOrigin, e.objectDir
		st.tlsOrigin, st.tlsFiles = e.tlsOrigin, e.tlsFiles
		return st.ServeObjects(sizes)
	}
	l, err := lab.New(lab.DefaultConfig())
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	st.Lab = l
	for _, ns := range []*lab.NS{l.Client, l.Fwd} {
		if err := ns.Sysctl("net.ipv4.tcp_tw_reuse", "1"); err != nil {
			return err
		}
	}
	if e.ccChosen {
		if err := l.SetCC(e.ccFwd); err != nil {
			return err
		}
	}
	st.Client, st.fwd, st.server = l.Client, l.Fwd, l.Server
	a := addressing{fwd: l.Cfg.FwdClient.Addr().String(), server: l.Cfg.Server.Addr().String()}
	if err := st.startOrigin(st.server, a); err != nil {
		return err
	}
	a.switchOrigin, st.SwitchOrigin = st.startNginxOrigin(ctx, a)
	st.addrs = a
	return st.ServeObjects(sizes)
}

// startConnForwarders starts in st the forwarders of specs, one process
// per forwarder for all of its targets, and returns a target per spec: its
// addresses (switchAddr the HTTP side, Addr(Echo) the plain TCP side) and
// processes, or why it is unavailable.
func (st *Env) startConnForwarders(ctx context.Context, specs []connSpec, engineReason func(string) string) []*Target {
	a := st.addrs
	out := connTargetsAt(a, specs)
	by := map[string][]*Target{}
	for i, c := range specs {
		t := out[i]
		if c.via == "" {
			continue
		}
		if c.via == "splicer" && c.engine != "auto" {
			t.Unavailable = engineReason(c.engine)
		}
		if c.proxy == "stream" {
			if _, err := os.Stat(nginxStreamModule); err != nil {
				t.Unavailable = "nginx's stream module is not installed (make bench-deps, or apt-get install libnginx-mod-stream)"
			}
		}
		if t.Unavailable == "" {
			by[c.via] = append(by[c.via], t)
		}
	}
	specOf := func(t *Target) connSpec {
		return connSpecs[slices.IndexFunc(connSpecs, func(c connSpec) bool { return c.name == t.Name })]
	}
	for via, ts := range by {
		var cfg, bin string
		var args []string
		switch via {
		case "splicer":
			cfg, bin = connSplicerConfig(a, ts, specOf), st.splicer
			args = []string{"run", "--config", filepath.Join(st.dir, "splicer.yaml")}
			if err := os.WriteFile(args[2], []byte(cfg), 0o644); err != nil {
				markUnavailable(ts, err.Error())
				continue
			}
		case "haproxy":
			if why := missing("haproxy"); why != "" {
				markUnavailable(ts, why)
				continue
			}
			path := filepath.Join(st.dir, "haproxy.cfg")
			if err := os.WriteFile(path, []byte(connHAProxyConfig(a, ts, specOf)), 0o644); err != nil {
				markUnavailable(ts, err.Error())
				continue
			}
			bin, args = "haproxy", []string{"-db", "-f", path}
		case "nginx":
			if why := missing("nginx"); why != "" {
				markUnavailable(ts, why)
				continue
			}
			dir := filepath.Join(st.dir, "nginx")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				markUnavailable(ts, err.Error())
				continue
			}
			path := filepath.Join(dir, "nginx.conf")
			if err := os.WriteFile(path, []byte(connNginxConfig(dir, a, ts, specOf)), 0o644); err != nil {
				markUnavailable(ts, err.Error())
				continue
			}
			bin, args = "nginx", []string{"-c", path, "-p", dir}
		}
		st.startConnProcess(ctx, via, bin, args, ts)
	}
	if len(by["splicer"]) > 0 {
		st.AdminAddr = connAdmin
	}
	return out
}

// connTargetsAt makes a target of each of specs with its addresses in a
// stage addressed a: switchAddr the HTTP side, Addr(Echo) the plain TCP
// side of a byte forwarder; route's are the origin's own.
func connTargetsAt(a addressing, specs []connSpec) []*Target {
	out := make([]*Target, len(specs))
	for i, c := range specs {
		t := &Target{Name: c.name, Peer: c.via != "splicer"}
		out[i] = t
		if c.via == "" {
			t.switchAddr, t.addrs[Echo] = a.switchOrigin, a.originAddr(Echo)
			continue
		}
		t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(c.port))
		if c.forwardsBytes() {
			t.addrs[Echo] = net.JoinHostPort(a.fwd, strconv.Itoa(c.port+connEchoOffset))
		}
	}
	return out
}

// startConnProcess runs one forwarder process for ts and waits until
// every one of their listeners answers.
func (st *Env) startConnProcess(ctx context.Context, logName, bin string, args []string, ts []*Target) {
	cmd, err := st.startListening(ctx, st.fwd, logName, ts[0].switchAddr, bin, args...)
	if cmd != nil {
		pids := func() []int { return []int{cmd.Process.Pid} }
		for _, t := range ts {
			t.pids = pids
		}
	}
	if err != nil {
		markUnavailable(ts, err.Error())
		return
	}
	for _, t := range ts {
		for _, addr := range []string{t.switchAddr, t.addrs[Echo]} {
			if addr == "" {
				continue
			}
			if err := st.waitListening(addr); err != nil {
				t.Unavailable = fmt.Sprintf("%s did not listen on %s: %v: %s", logName, addr, err, strings.Join(strings.Fields(st.LogTail(logName)), " "))
			}
		}
	}
}

func markUnavailable(ts []*Target, why string) {
	for _, t := range ts {
		t.Unavailable = why
	}
}

// connSplicerConfig is one splicer process with the listeners of ts: a
// tcp target's to the switch origin (wrk's HTTP) and to the echo (the
// plain TCP points), each pinned to its engine; the HTTP proxies with
// engine auto in front of the switch origin, the forward proxy's cache off.
func connSplicerConfig(a addressing, ts []*Target, specOf func(*Target) connSpec) string {
	cfg := "admin: " + connAdmin + "\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nlisteners:\n"
	for _, t := range ts {
		c := specOf(t)
		switch c.proxy {
		case "tcp":
			cfg += fmt.Sprintf("  - {name: %s, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s}\n",
				t.Name, t.switchAddr, a.switchOrigin, c.engine)
			cfg += fmt.Sprintf("  - {name: %s-echo, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s}\n",
				t.Name, t.addrs[Echo], a.originAddr(Echo), c.engine)
		case "http-reverse":
			cfg += fmt.Sprintf("  - {name: %s, listen: %q, proxy: http-reverse, engine: %s, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
				t.Name, t.switchAddr, c.engine, a.switchOrigin)
		case "http-forward":
			cfg += fmt.Sprintf("  - {name: %s, listen: %q, proxy: http-forward, engine: %s, idle_timeout: 0s, http: {cache_bytes: 0}}\n",
				t.Name, t.switchAddr, c.engine)
		}
	}
	return cfg
}

// connHAProxyConfig is one HAProxy process with the frontends of ts: mode
// tcp to the switch origin and to the echo, mode http as the switch
// experiments' (haproxySwitch).
func connHAProxyConfig(a addressing, ts []*Target, specOf func(*Target) connSpec) string {
	cfg := haproxyPreamble("")
	for _, t := range ts {
		if specOf(t).proxy == "http" {
			cfg += strings.Replace(haproxySwitch(t.switchAddr, a.switchOrigin, 0), "listen switch", "listen "+t.Name, 1)
			continue
		}
		cfg += fmt.Sprintf("listen %s\n  bind %s\n  server origin %s\nlisten %s-echo\n  bind %s\n  server origin %s\n",
			t.Name, t.switchAddr, a.switchOrigin, t.Name, t.addrs[Echo], a.originAddr(Echo))
	}
	return cfg
}

// connNginxConfig is one nginx process with the servers of ts: proxy_pass
// as the switch experiments' (nginxConfig), stream (loaded from
// libnginx-mod-stream) to the switch origin and to the echo.
func connNginxConfig(dir string, a addressing, ts []*Target, specOf func(*Target) connSpec) string {
	var httpCfg, stream string
	for _, t := range ts {
		if specOf(t).proxy == "http" {
			httpCfg = nginxConfig(dir, a.switchOrigin, t.switchAddr)
			continue
		}
		stream = fmt.Sprintf("load_module %s;\n", nginxStreamModule)
		stream += fmt.Sprintf("stream {\n\tserver { listen %s; proxy_pass %s; }\n\tserver { listen %s; proxy_pass %s; }\n}\n",
			t.switchAddr, a.switchOrigin, t.addrs[Echo], a.originAddr(Echo))
	}
	if httpCfg == "" {
		httpCfg = nginxPreamble(dir) + "\n}\n"
	}
	// load_module must come before the blocks; stream follows http.
	mod, rest, _ := strings.Cut(stream, "\n")
	if stream == "" {
		return httpCfg
	}
	return mod + "\n" + httpCfg + rest
}

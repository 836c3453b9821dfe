// Peers splicer is measured against: HAProxy with and without splice, and socat.

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/splicer/splicer/internal/config"
)

// installHint names the Debian package that provides a missing peer.
var installHint = map[string]string{"haproxy": "haproxy", "socat": "socat", "nginx": "nginx-light", "wrk": "wrk", "sockperf": "sockperf", "iperf3": "iperf3"}

func (e *Env) startPeers(ctx context.Context, a addressing, pin bool) {
	switchThreads := 0 // HAProxy's own choice: a thread per CPU
	if pin {
		switchThreads = len(splitCPUs(runtime.NumCPU(), true).fwd)
	}
	e.startHAProxy(ctx, a, "haproxy", false, switchThreads)
	e.startHAProxy(ctx, a, "haproxy-splice", true, switchThreads)
	e.startSocat(ctx, a)
	e.startNginx(ctx, a)
	e.startHAProxyBigBuffer(ctx, a, switchThreads)
}

func missing(bin string) string {
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Sprintf("%s not installed (make bench-deps, or apt-get install %s)", bin, installHint[bin])
	}
	return ""
}

// startHAProxy runs HAProxy in TCP mode with a listener per service; with
// splice it uses "option splice-auto", HAProxy's own splice(2) path. Its
// HTTP switch runs on switchThreads threads, 0 for all of them.
func (e *Env) startHAProxy(ctx context.Context, a addressing, name string, splice bool, switchThreads int) {
	t := &Target{Name: name, Peer: true}
	e.Targets = append(e.Targets, t)
	if t.Unavailable = missing("haproxy"); t.Unavailable != "" {
		return
	}
	cfg := haproxyPreamble("")
	if splice {
		cfg += "  option splice-auto\n"
	}
	for s := Service(0); s < numServices; s++ {
		t.addrs[s] = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+int(s)))
		cfg += fmt.Sprintf("listen %s\n  bind %s\n  server origin %s\n", s, t.addrs[s], a.originAddr(s))
	}
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[name]+switchOffset))
	cfg += haproxySwitch(t.switchAddr, a.switchOrigin, switchThreads)
	e.runHAProxy(ctx, t, cfg, t.addrs[Sink])
}

// haproxyBigBuffer is the haproxy-buf256k switch peer's tune.bufsize:
// HAProxy's 16 KiB default raised to what an operator serving large
// objects might set. Beside the default it shows what the default costs
// HAProxy (RESULTS.md, "HAProxy's 16 KiB buffer"; under bbr without fq
// half its rate from 64 KiB).
const haproxyBigBuffer = 256 << 10

// startHAProxyBigBuffer runs HAProxy as an HTTP switch alone
// (e.SwitchPeers), configured as the haproxy peer's switch but with
// tune.bufsize haproxyBigBuffer.
func (e *Env) startHAProxyBigBuffer(ctx context.Context, a addressing, switchThreads int) {
	t := &Target{Name: "haproxy-buf256k", Peer: true}
	e.SwitchPeers = append(e.SwitchPeers, t)
	if t.Unavailable = missing("haproxy"); t.Unavailable != "" {
		return
	}
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts[t.Name]+switchOffset))
	cfg := haproxyPreamble(fmt.Sprintf("  tune.bufsize %d\n", haproxyBigBuffer)) +
		haproxySwitch(t.switchAddr, a.switchOrigin, switchThreads)
	e.runHAProxy(ctx, t, cfg, t.switchAddr)
}

// haproxyPreamble is the global and defaults sections of every HAProxy
// peer, with tune (whole lines) added to global. The defaults' mode tcp
// is the TCP listeners'; the switch sets mode http itself.
func haproxyPreamble(tune string) string {
	return "global\n  maxconn 6000\n" + tune + "  log stderr format short local0 err\n" +
		"defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n"
}

// runHAProxy starts HAProxy for t with configuration cfg in the forwarder
// namespace and waits until it listens on addr; t says why it is
// unavailable if it does not.
func (e *Env) runHAProxy(ctx context.Context, t *Target, cfg, addr string) {
	path := filepath.Join(e.dir, t.Name+".cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Unavailable = err.Error()
		return
	}
	cmd, err := e.startListening(ctx, e.fwd, t.Name, addr, "haproxy", "-db", "-f", path)
	if cmd != nil {
		t.pids = func() []int { return []int{cmd.Process.Pid} }
	}
	if err != nil {
		t.Unavailable = err.Error()
	}
}

// haproxySwitch is the switch experiments' HAProxy section: an HTTP
// switch on listen, keep-alive both ways, in front of the origin, served
// by the first threads threads (0: all), adding to every request what
// splicer's http-reverse adds by default for a client it does not trust.
// The client's own Forwarded and X-Forwarded-* fields are dropped;
// Forwarded (for, proto, host), X-Forwarded-For and X-Forwarded-Proto
// name the client. Without them HAProxy would write less per request
// than splicer. (HAProxy 2.6 has no "option forwarded".)
func haproxySwitch(listen, origin string, threads int) string {
	bind := listen
	if threads > 0 {
		bind += " thread 1-" + strconv.Itoa(threads)
	}
	return fmt.Sprintf(`listen switch
  mode http
  option http-keep-alive
  bind %s
  http-request del-header Forwarded
  http-request del-header X-Forwarded-Host
  http-request del-header X-Forwarded-For
  http-request set-header Forwarded "for=%%[src];proto=http;host=\"%%[req.hdr(host)]\""
  http-request set-header X-Forwarded-Proto http
  option forwardfor
  server origin %s
`, bind, origin)
}

// startSocat runs one forking socat per service, the classic user-space relay.
func (e *Env) startSocat(ctx context.Context, a addressing) {
	t := &Target{Name: "socat", Peer: true}
	e.Targets = append(e.Targets, t)
	if t.Unavailable = missing("socat"); t.Unavailable != "" {
		return
	}
	var cmds []*exec.Cmd
	for s := Service(0); s < numServices; s++ {
		t.addrs[s] = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts["socat"]+int(s)))
		listen := fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr,backlog=4096", targetPorts["socat"]+int(s), a.fwd)
		cmd, err := e.start(ctx, e.fwd, "socat-"+s.String(), "socat", "-b", "65536", listen, "TCP:"+a.originAddr(s))
		if err != nil {
			t.Unavailable = err.Error()
			return
		}
		cmds = append(cmds, cmd)
	}
	t.pids = func() []int {
		var p []int
		for _, c := range cmds {
			p = append(p, c.Process.Pid)
		}
		return p
	}
	if err := e.waitListening(t.addrs[Sink]); err != nil {
		t.Unavailable = fmt.Sprintf("socat did not start: %v", err)
	}
}

// defaultEngines is the engine configuration splicer runs with in the bench.
func defaultEngines() config.Engines { return config.Default().Engines }

// Two forwarders behind an ECMP route: the client's multipath route to a shared service address hashes each connection (L4: addresses and ports) to one of two splicer processes, each splicing its own pairs; when one forwarder leaves the route, new connections all reach the other, and the pairs it held are reset by the survivor, which has no state for them (as with any L4 balancer fleet without connection sync).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
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

const vip = "10.99.9.1" // the service address both forwarders hold

// ipIn runs `ip` in namespace ns (empty: the host), failing tb on error.
func ipIn(tb testing.TB, ns string, args ...string) {
	tb.Helper()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func TestTwoForwardersBehindECMP(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	fwd2 := l.Name + "-fwd2"
	ipIn(t, "", "netns", "add", fwd2)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "pids", fwd2).Run()
		if out, _ := exec.Command("ip", "netns", "pids", fwd2).Output(); len(out) > 0 {
			for _, pid := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", pid).Run()
			}
		}
		exec.Command("ip", "netns", "del", fwd2).Run()
	})
	// client <-> fwd2 (10.99.3.0/24) and fwd2 <-> server (10.99.4.0/24).
	ipIn(t, l.Client.Name, "link", "add", "veth-fwd2", "type", "veth", "peer", "name", "veth-client", "netns", fwd2)
	ipIn(t, l.Server.Name, "link", "add", "veth-fwd2", "type", "veth", "peer", "name", "veth-server", "netns", fwd2)
	for _, a := range [][3]string{
		{l.Client.Name, "veth-fwd2", "10.99.3.2/24"}, {fwd2, "veth-client", "10.99.3.1/24"},
		{fwd2, "veth-server", "10.99.4.1/24"}, {l.Server.Name, "veth-fwd2", "10.99.4.2/24"},
	} {
		ipIn(t, a[0], "addr", "add", a[2], "dev", a[1])
		ipIn(t, a[0], "link", "set", a[1], "up")
	}
	ipIn(t, fwd2, "link", "set", "lo", "up")
	for _, ns := range []string{l.Fwd.Name, fwd2} {
		ipIn(t, ns, "addr", "add", vip+"/32", "dev", "lo")
	}
	if out, err := exec.Command("ip", "netns", "exec", l.Client.Name, "sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1").CombinedOutput(); err != nil {
		t.Fatalf("L4 multipath hashing: %v: %s", err, out)
	}
	ipIn(t, l.Client.Name, "route", "add", vip+"/32", "nexthop", "via", "10.99.1.1", "nexthop", "via", "10.99.3.1")

	// An echo origin on every server address.
	ln, err := l.Server.Listen("tcp", "0.0.0.0:9700")
	if err != nil {
		t.Fatal(err)
	}
	origintest.Serve(t, ln, origin.Echo)

	// One splicer per forwarder namespace, the same listener on the VIP.
	bin := splicerBinary(t)
	start := func(ns, upstream, admin string) {
		dir := t.TempDir()
		cfg := fmt.Sprintf("admin: %s\nshutdown_timeout: 2s\nlisteners:\n  - {name: svc, listen: '%s:7000', upstream: ['%s'], engine: auto}\n", admin, vip, upstream)
		path := filepath.Join(dir, "splicer.yaml")
		writeFile(t, path, []byte(cfg))
		cmd := exec.Command("ip", "netns", "exec", ns, bin, "run", "--config", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	}
	start(l.Fwd.Name, "10.99.2.2:9700", "127.0.0.1:19911")
	start(fwd2, "10.99.4.2:9700", "127.0.0.1:19912")

	dial := func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return l.Client.Dial(ctx, "tcp", vip+":7000")
	}
	echo := func(c net.Conn, msg string) error {
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		b := make([]byte, len(msg))
		_, err := io.ReadFull(c, b)
		if err == nil && string(b) != msg {
			err = fmt.Errorf("echo %q", b)
		}
		return err
	}
	// The forwarder a connection hashed to shows in its source address:
	// the route's nexthop device picks it.
	via := func(c net.Conn) string {
		if strings.HasPrefix(c.LocalAddr().String(), "10.99.3.") {
			return "fwd2"
		}
		return "fwd1"
	}
	// Each forwarder's admin answers once its listener is bound.
	for ns, admin := range map[string]string{l.Fwd.Name: "127.0.0.1:19911", fwd2: "127.0.0.1:19912"} {
		waitUntil(t, "the forwarder in "+ns, make(chan error), func() bool {
			return exec.Command("ip", "netns", "exec", ns, "curl", "-sf", "http://"+admin+"/ready").Run() == nil
		})
	}

	conns := map[string][]net.Conn{}
	for i := 0; i < 32; i++ {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := echo(c, "hello"); err != nil {
			t.Fatalf("connection %d through %s: %v", i, via(c), err)
		}
		conns[via(c)] = append(conns[via(c)], c)
	}
	if len(conns["fwd1"]) == 0 || len(conns["fwd2"]) == 0 {
		t.Fatalf("32 connections all hashed to one forwarder: fwd1 %d, fwd2 %d", len(conns["fwd1"]), len(conns["fwd2"]))
	}
	t.Logf("32 connections: %d through fwd1, %d through fwd2", len(conns["fwd1"]), len(conns["fwd2"]))
	// Each forwarder splices the pairs hashed to it, and only those.
	for name, f := range map[string][2]string{"fwd1": {l.Fwd.Name, "127.0.0.1:19911"}, "fwd2": {fwd2, "127.0.0.1:19912"}} {
		var flows []map[string]any
		out, err := exec.Command("ip", "netns", "exec", f[0], "curl", "-sf", "http://"+f[1]+"/flows").Output()
		if err != nil || json.Unmarshal(out, &flows) != nil {
			t.Fatalf("%s /flows: %v %s", name, err, out)
		}
		spliced := 0
		for _, fl := range flows {
			if fl["state"] == "spliced" {
				spliced++
			}
		}
		if spliced != len(conns[name]) {
			t.Errorf("%s shows %d spliced pairs, %d connections hashed to it", name, spliced, len(conns[name]))
		}
	}

	// fwd2 leaves the route.
	ipIn(t, l.Client.Name, "route", "replace", vip+"/32", "via", "10.99.1.1")
	for _, c := range conns["fwd1"] {
		if err := echo(c, "still"); err != nil {
			t.Errorf("a pair of the forwarder that stayed: %v", err)
		}
	}
	// The moved pairs' segments now reach fwd1, which has neither their
	// sockets nor a route back to fwd2's client side: they get nowhere.
	var broken atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns["fwd2"] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(time.Second))
			io.WriteString(c, "moved")
			if _, err := c.Read(make([]byte, 5)); err != nil {
				broken.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := int(broken.Load()); n != len(conns["fwd2"]) {
		t.Errorf("%d of %d pairs of the forwarder that left still work; without shared state they cannot", len(conns["fwd2"])-n, len(conns["fwd2"]))
	}
	for i := 0; i < 8; i++ {
		c, err := dial()
		if err != nil {
			t.Fatalf("new connection after fwd2 left: %v", err)
		}
		if via(c) != "fwd1" || echo(c, "new") != nil {
			t.Errorf("new connection %d via %s did not reach the remaining forwarder", i, via(c))
		}
		c.Close()
	}
}

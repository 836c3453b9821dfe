// Lab tests of scale: thousands of pairs spliced at once, their client and server ends held by helper processes (a process may hold at most 20,000 descriptors here), idle, then each echoing a message and closing to TIME_WAIT; the forwarder holding no descriptor per pair.

package ip

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

// TestEngineTenThousandPairs: helper processes open 10,000 connections
// from the client namespace and accept them in the server's; the forwarder
// (this process) dials each upstream and splices the pair, which closes its
// two sockets, so it holds few descriptors at a time. Once all 10,000 are
// in the table, every client sends a message, half-closes and reads the
// echo; every Splice ends with EndEOF. Skipped with -short.
func TestEngineTenThousandPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 pairs: not in -short")
	}
	n := pairsFromEnv(10000)
	el := newEngineLab(t, Options{MaxPairs: n + 64})
	m := spliceMany(t, el, n, 0, el.l.Fwd.Dial)
	m.echo(t)
}

// TestEngineManyPairsHoldNoDescriptors: 3,000 idle pairs to one server
// through a port range of 16 ports, as the forwarder dials them (a port
// of the range while one is free toward the server, a kernel port after):
// once all are spliced the forwarder holds no descriptor per pair (the
// ports of the 2,984 dialled outside the range are reserved in the
// namespace instead: local_ports_held), at most a few dozen more than
// before the first pair; then every pair echoes and ends with EndEOF, and
// every held port is given back once the pairs are swept.
func TestEngineManyPairsHoldNoDescriptors(t *testing.T) {
	n := pairsFromEnv(3000)
	el := newEngineLab(t, Options{MaxPairs: n + 64, TimeWait: time.Second,
		LocalPorts: PortRange{Low: 45000, High: 45015}})
	before, rssBefore := testenv.OpenFDs(t), rssKB(t)
	// The range's pairs one at a time: a port picked while a pair in
	// control mode uses it toward the server is refused at connect, but
	// taken if that pair is spliced and closes its socket meanwhile.
	m := spliceMany(t, el, n, 16, func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialFromRange(ctx, el, addr)
	})
	const most = 48 // descriptors of the engine's first splices (links, raw sockets), not per pair
	fds := testenv.OpenFDs(t)
	for deadline := time.Now().Add(5 * time.Second); fds-before > most && time.Now().Before(deadline); fds = testenv.OpenFDs(t) {
		time.Sleep(50 * time.Millisecond) // the last pairs' sockets closing
	}
	c := el.e.Counters()
	t.Logf("%d idle pairs spliced: %d descriptors (%d before), %d held by pairs; %d ports outside the range reserved, %d not; RSS %.1f KB per pair",
		n, fds, before, c["port_hold_descriptors"], c["local_ports_held"], c["local_ports_unreserved"], float64(rssKB(t)-rssBefore)/float64(n))
	if fds-before > most {
		t.Errorf("with %d pairs spliced the forwarder holds %d descriptors, %d more than before the first: want at most %d whatever the pair count", n, fds, fds-before, most)
	}
	if got := c["local_ports_held"]; got < uint64(n)-16 {
		t.Errorf("local_ports_held %d, want the %d ports dialled outside the range", got, n-16)
	}
	m.echo(t)
	// Past TIME_WAIT (1 s) the sweep removes the pairs and gives their
	// ports back.
	deadline := time.Now().Add(10 * time.Second)
	for el.e.Counters()["local_ports_held"] > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := el.e.Counters()["local_ports_held"]; got > 0 {
		t.Errorf("%d ports still reserved 10 s after the pairs closed", got)
	}
}

// pairsFromEnv is IP_PAIRS, or def.
func pairsFromEnv(def int) int {
	if v, err := strconv.Atoi(os.Getenv("IP_PAIRS")); err == nil {
		return v
	}
	return def
}

// dialFromRange dials addr from the forwarder namespace as the forwarder
// does for an ip listener: from the port the engine hands out, the next
// one when that 4-tuple is in use, a kernel port when it has none.
func dialFromRange(ctx context.Context, el *engineLab, addr string) (net.Conn, error) {
	var refused atomic.Bool
	var picks []sockopt.Pick
	inRange := sockopt.WithLocalPort(ctx, func(server netip.AddrPort) (uint16, bool) {
		p, ok := el.e.UpstreamPort(server)
		refused.Store(!ok)
		if ok {
			picks = append(picks, sockopt.Pick{Server: server, Port: p})
		}
		return p, ok
	})
	for range 16 {
		c, err := el.l.Fwd.Dial(inRange, "tcp", addr)
		for _, p := range picks {
			if tc, _ := c.(*net.TCPConn); tc != nil && tc.LocalAddr().(*net.TCPAddr).Port == int(p.Port) {
				el.e.UpstreamDialled(p.Server, p.Port, tc)
			} else {
				el.e.UpstreamDialled(p.Server, p.Port, nil)
			}
		}
		picks = picks[:0]
		if err == nil || !sockopt.IsPortInUse(err) || refused.Load() {
			return c, err
		}
	}
	return el.l.Fwd.Dial(ctx, "tcp", addr)
}

// rssKB is this process's resident set in KiB.
func rssKB(tb testing.TB) int {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return 0
}

// manyPairs is n pairs spliced at once by spliceMany, their ends in
// helper processes.
type manyPairs struct {
	n              int
	clients        *testenv.Helper
	results        chan error
	spliced, ended *atomic.Int64
	ctx            context.Context
}

// spliceMany has helper processes open n connections from the client
// namespace and accept them in the server's; this process, the forwarder,
// accepts each, dials its upstream with dial and splices the pair (at
// most 512 pairs' sockets open here at a time; the first serial pairs
// one after the other, and the rest once they are spliced). It returns once all n are spliced, idle.
func spliceMany(tb testing.TB, el *engineLab, n, serial int, dial func(context.Context, string, string) (net.Conn, error)) *manyPairs {
	tb.Helper()
	port := uint16(el.port.Add(1))
	fwdAddr := netip.AddrPortFrom(el.l.Cfg.FwdClient.Addr(), port).String()
	srvAddr := netip.AddrPortFrom(el.l.Cfg.Server.Addr(), port).String()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	tb.Cleanup(cancel)
	helperRun := "-test.run=^TestEngineManyHelper$"
	startStreamHelper(tb, el.l.Server.Command(ctx, os.Args[0], helperRun), "echo-servers", srvAddr, int64(n))
	fln, err := el.l.Fwd.Listen("tcp", fwdAddr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { fln.Close() })
	m := &manyPairs{n: n, results: make(chan error, n), spliced: new(atomic.Int64), ended: new(atomic.Int64), ctx: ctx}
	m.clients = startStreamHelper(tb, el.l.Client.Command(ctx, os.Args[0], helperRun), "clients", fwdAddr, int64(n))
	slots := make(chan struct{}, 512)
	start := time.Now()
	go func() {
		for i := range n {
			slots <- struct{}{}
			for i <= serial && m.spliced.Load() < int64(i) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			fa, err := fln.Accept()
			if err != nil {
				m.results <- err
				return
			}
			go func() {
				fb, err := dial(ctx, "tcp", srvAddr)
				if err != nil {
					fa.Close()
					<-slots
					m.results <- err
					return
				}
				p := engine.NewPair(uint64(i), "lab", fa.(*net.TCPConn))
				p.SetUpstream(fb.(*net.TCPConn))
				opts := engine.Both(0)
				opts.OnSpliced = func() { m.spliced.Add(1); <-slots }
				opts.OnDetached = func() { p.CloseConns() } // as the forwarder does
				res, err := el.e.Splice(ctx, p, opts)
				fa.Close()
				fb.Close()
				if err == nil && res.End != engine.EndEOF {
					err = fmt.Errorf("pair %d ended with %v", i, res.End)
				}
				if err != nil && engine.IsFallback(err) {
					<-slots
				}
				m.ended.Add(1)
				m.results <- err
			}()
		}
	}()
	if got := m.clients.Line(tb); got != "connected" {
		tb.Fatalf("clients said %q (%d pairs spliced, %d ended, after %v)", got, m.spliced.Load(), m.ended.Load(), time.Since(start))
	}
	for m.spliced.Load() < int64(n) {
		select {
		case err := <-m.results:
			tb.Fatalf("a splice ended early: %v", err)
		case <-ctx.Done():
			tb.Fatalf("%d of %d pairs spliced", m.spliced.Load(), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	tb.Logf("%d pairs spliced in %v; %d in the table", n, time.Since(start).Round(time.Millisecond), len(el.e.dp.Pairs()))
	return m
}

// echo has every client send a message, half-close and check the echo,
// and waits for every Splice to end with EndEOF.
func (m *manyPairs) echo(tb testing.TB) {
	tb.Helper()
	m.clients.Send(tb, "go")
	if got := m.clients.Line(tb); got != "ok" {
		tb.Fatalf("clients said %q", got)
	}
	for range m.n {
		select {
		case err := <-m.results:
			if err != nil {
				tb.Fatal(err)
			}
		case <-m.ctx.Done():
			tb.Fatalf("%d of %d splices ended", m.ended.Load(), m.n)
		}
	}
}

// TestEngineManyHelper is the helper process of TestEngineTenThousandPairs:
// "echo-servers" listens on IP_ADDR and echoes IP_N connections;
// "clients" opens IP_N connections to IP_ADDR, says "connected", waits for
// "go", then on each sends a message, half-closes and checks the echo, and
// says "ok" (or what went wrong).
func TestEngineManyHelper(t *testing.T) {
	role, addr := os.Getenv("IP_HELPER"), os.Getenv("IP_ADDR")
	if role == "" {
		t.Skip("helper process of TestEngineTenThousandPairs")
	}
	n, _ := strconv.Atoi(os.Getenv("IP_N"))
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("RLIMIT_NOFILE %+v: %v", lim, err)
	}
	switch role {
	case "echo-servers":
		l := listenReady(t, addr)
		var wg sync.WaitGroup
		for range n {
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				// Through a buffer: io.Copy between TCP connections
				// splices through a pipe, two more descriptors each.
				io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 512))
				c.Close()
			})
		}
		wg.Wait()
	case "clients":
		fmt.Println("> ready")
		conns := make([]net.Conn, n)
		var wg sync.WaitGroup
		var failed atomic.Value
		sem := make(chan struct{}, 64)
		for i := range conns {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := net.DialTimeout("tcp", addr, 30*time.Second)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				conns[i] = c
			})
		}
		wg.Wait()
		if f := failed.Load(); f != nil {
			fmt.Println("> dial: " + f.(string))
			return
		}
		fmt.Println("> connected")
		var goLine string
		fmt.Scanln(&goLine)
		for i, c := range conns {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				msg := fmt.Sprintf("pair %05d says hello", i)
				c.SetDeadline(time.Now().Add(60 * time.Second))
				c.Write([]byte(msg))
				c.(*net.TCPConn).CloseWrite()
				got, err := io.ReadAll(c)
				c.Close()
				if string(got) != msg || err != nil {
					failed.Store(fmt.Sprintf("pair %d: sent %q, got %q, %v", i, msg, got, err))
				}
			})
		}
		wg.Wait()
		if f := failed.Load(); f != nil {
			fmt.Println("> " + f.(string))
			return
		}
		fmt.Println("> ok")
	}
}

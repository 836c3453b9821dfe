// Tests that build real labs: reachability, commands, sysctls, loss, rate limits, cleanup and isolation.

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

func TestHostsReachEachOther(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	c := l.Cfg
	for _, tc := range []struct {
		name     string
		from, to *NS
		dst, src netip.Addr // src: where the listener must see the connection come from
	}{
		{"client to forwarder", l.Client, l.Fwd, c.FwdClient.Addr(), c.Client.Addr()},
		{"server to forwarder", l.Server, l.Fwd, c.FwdServer.Addr(), c.Server.Addr()},
		{"client to server through kernel forwarding", l.Client, l.Server, c.Server.Addr(), c.Client.Addr()},
		{"IPv6 client to forwarder", l.Client, l.Fwd, c.FwdClient6.Addr(), c.Client6.Addr()},
		{"IPv6 server to forwarder", l.Server, l.Fwd, c.FwdServer6.Addr(), c.Server6.Addr()},
		{"IPv6 client to server through kernel forwarding", l.Client, l.Server, c.Server6.Addr(), c.Client6.Addr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := mustListen(t, tc.to, tc.dst)
			got := echoOnce(t, tc.from, ln)
			if got != tc.src {
				t.Errorf("listener saw the connection come from %v, want %v", got, tc.src)
			}
		})
	}
}

func TestDoRunsInNamespaceAndReturns(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	// Locked, so that before and after are read on the thread Do switches.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := currentNetns(t)
	err := l.Client.Do(func() error {
		if _, err := net.InterfaceByName(ClientIf); err != nil {
			return fmt.Errorf("client interface not visible inside Do: %w", err)
		}
		if _, err := net.InterfaceByName(FwdClientIf); err == nil {
			return errors.New("forwarder interface visible from the client namespace")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := currentNetns(t); !after.Equal(before) {
		t.Error("Do left the thread in another namespace")
	}
}

func currentNetns(tb testing.TB) netns.NsHandle {
	tb.Helper()
	h, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

func TestCommandRunsInNamespace(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	out, err := l.Client.Command(context.Background(), "ip", "-o", "addr", "show", "dev", ClientIf).Output()
	if err != nil {
		t.Fatalf("ip addr in client: %v", err)
	}
	for _, want := range []string{"inet " + l.Cfg.Client.String(), "inet6 " + l.Cfg.Client6.String()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ip addr in client shows no %q:\n%s", want, out)
		}
	}
}

func TestSysctlChangesOnlyThatNamespace(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	const key, file = "net.ipv4.tcp_sack", "/proc/sys/net/ipv4/tcp_sack"
	host := readTrimmed(t, file)
	want := map[string]string{"0": "1", "1": "0"}[host]
	if err := l.Client.Sysctl(key, want); err != nil {
		t.Fatal(err)
	}
	out, err := l.Client.Command(context.Background(), "cat", file).Output()
	if err != nil {
		t.Fatalf("read %s in client: %v", file, err)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("%s in client = %q, want %q", key, got, want)
	}
	if got := readTrimmed(t, file); got != host {
		t.Errorf("%s on the host changed from %q to %q", key, host, got)
	}
}

func TestSetLossDropsThatShareOfPackets(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	link := l.ClientLink()
	rx := listenUDP(t, l.Fwd, l.Cfg.FwdClient.Addr())
	tx := dialUDP(t, l.Client, rx.addr)
	// A first datagram resolves ARP, so that only test datagrams meet the program.
	sendDatagrams(t, tx, 1)
	rx.waitFor(t, 1)

	if err := l.SetLoss(link, TowardServer, 20); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	sendDatagrams(t, tx, n)
	stats, err := l.LossStats(link, TowardServer)
	testenv.Eventually(t, "every datagram received or dropped", func() bool {
		stats, err = l.LossStats(link, TowardServer)
		return err != nil || rx.count()-1+stats.Dropped >= n
	})
	if err != nil {
		t.Fatal(err)
	}
	lost := n - (rx.count() - 1)
	if share := float64(lost) / n; share < 0.10 || share > 0.30 {
		t.Errorf("lost %d of %d datagrams (%.1f%%), want about 20%%", lost, n, share*100)
	}
	if stats.Dropped < lost {
		t.Errorf("lost %d datagrams but the program dropped only %d", lost, stats.Dropped)
	}
	// A handful of stray packets (IPv6 neighbour or multicast chatter) may
	// cross the link during the test too.
	if stats.Total() < n || stats.Total() > n+50 {
		t.Errorf("program saw %d packets (%+v), want %d plus a few", stats.Total(), stats, n)
	}
	if _, err := l.LossStats(link, TowardClient); err == nil {
		t.Error("LossStats toward the client found a program that SetLoss never attached")
	}

	if err := l.SetLoss(link, TowardServer, 0); err != nil {
		t.Fatal(err)
	}
	if progs := tcxPrograms(t, link.ServerSide, ebpf.AttachTCXIngress); len(progs) != 0 {
		t.Errorf("loss 0%% left %d tcx programs on %s", len(progs), link.ServerSide.Interface)
	}
	before := rx.count()
	sendDatagrams(t, tx, 200)
	rx.waitFor(t, before+200)
}

func TestSetRateLimitsBulkTransfer(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	link := l.ClientLink()
	const limit = 50_000_000
	if err := l.SetRate(link, limit); err != nil {
		t.Fatal(err)
	}
	for _, end := range []End{link.ClientSide, link.ServerSide} {
		if got := rootQdisc(t, end); got != "tbf" {
			t.Errorf("root qdisc on %s = %q, want tbf", end.Interface, got)
		}
	}
	// 4 MiB take about 0.7 s at 50 Mbit/s; unlimited, a veth moves them in
	// milliseconds.
	rate := transferRate(t, l.Client, l.Fwd, l.Cfg.FwdClient.Addr(), 4<<20)
	if rate > 2*limit {
		t.Errorf("bulk transfer ran at %.0f Mbit/s through a %d Mbit/s limit", rate/1e6, limit/1_000_000)
	}

	if err := l.SetRate(link, 0); err != nil {
		t.Fatal(err)
	}
	for _, end := range []End{link.ClientSide, link.ServerSide} {
		if got := rootQdisc(t, end); got == "tbf" {
			t.Errorf("rate 0 left tbf on %s", end.Interface)
		}
	}
}

// TestSetMTUChangesBothEnds: SetMTU on the client link sets both its ends
// and leaves the server link alone; a client's connection across the
// smaller link announces the smaller MSS (1400 - 40), one between the
// forwarder and the server the usual 1460.
func TestSetMTUChangesBothEnds(t *testing.T) {
	t.Parallel()
	l := NewT(t, DefaultConfig())
	if err := l.SetMTU(l.ClientLink(), 1400); err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]int{"client": 1400, "server": 1500} {
		lk := l.ClientLink()
		if link == "server" {
			lk = l.ServerLink()
		}
		for _, end := range []End{lk.ClientSide, lk.ServerSide} {
			if got, err := end.MTU(); err != nil || got != want {
				t.Errorf("%s link, %s:%s: MTU %d, %v; want %d", link, end.NS.Name, end.Interface, got, err, want)
			}
		}
	}
	for _, tc := range []struct {
		name string
		from *NS
		want int
	}{{"client to server", l.Client, 1360}, {"forwarder to server", l.Fwd, 1460}} {
		ln := mustListen(t, l.Server, l.Cfg.Server.Addr())
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			accepted <- c
		}()
		mustDial(t, tc.from, ln.Addr().String())
		c := <-accepted
		if c == nil {
			t.Fatalf("%s: accept failed", tc.name)
		}
		mss, err := sockopt.AnnouncedMSS(c.(*net.TCPConn))
		c.Close()
		if err != nil || mss != tc.want {
			t.Errorf("%s: the connection announced MSS %d, %v; want %d", tc.name, mss, err, tc.want)
		}
	}
	if err := l.SetMTU(Link{Name: "foreign", ClientSide: End{&NS{Name: "x"}, "y"}}, 1400); err == nil {
		t.Error("SetMTU accepted a link of no lab")
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	l, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sleeper := l.Server.Command(context.Background(), "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	link := l.ClientLink()
	if err := l.SetLoss(link, BothWays, 10); err != nil {
		t.Fatal(err)
	}
	progs := append(tcxPrograms(t, link.ServerSide, ebpf.AttachTCXIngress), tcxPrograms(t, link.ClientSide, ebpf.AttachTCXIngress)...)
	if len(progs) != 2 {
		t.Fatalf("loss both ways attached %d programs, want 2", len(progs))
	}

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sleeper.Wait(); err == nil {
		t.Error("command in the lab outlived Close")
	}
	if left := namespacesWithPrefix(t, l.Name); len(left) != 0 {
		t.Errorf("Close left namespaces %v", left)
	}
	for _, p := range progs {
		testenv.Eventually(t, fmt.Sprintf("loss program %d unloaded", p.ID), func() bool {
			prog, err := ebpf.NewProgramFromID(p.ID)
			if err == nil {
				prog.Close()
			}
			return errors.Is(err, os.ErrNotExist)
		})
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := l.SetLoss(link, TowardServer, 10); !errors.Is(err, ErrClosed) {
		t.Errorf("SetLoss after Close = %v, want ErrClosed", err)
	}
}

// TestCloseAfterIPNetnsAdd: a namespace added with `ip netns add` while a
// lab runs (a test's own, an operator's) leaves the lab's namespaces
// removable. On a host where /run/netns was not yet a mount point, that
// command binds it over itself and, unless the lab did so first, hides
// the lab's mounts: Close failed with "device or resource busy".
func TestCloseAfterIPNetnsAdd(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	extra := l.Name + "-extra"
	if out, err := exec.Command("ip", "netns", "add", extra).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", extra).Run() })
	if err := l.Close(); err != nil {
		t.Fatalf("Close after ip netns add: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "del", extra).CombinedOutput(); err != nil {
		t.Errorf("ip netns del: %v: %s", err, out)
	}
	if left := namespacesWithPrefix(t, l.Name); len(left) != 0 {
		t.Errorf("left namespaces %v", left)
	}
}

func TestTwoLabsDoNotCollide(t *testing.T) {
	t.Parallel()
	a := NewT(t, DefaultConfig())
	b := NewT(t, DefaultConfig())
	if a.Server.Name == b.Server.Name {
		t.Fatalf("both labs named their server %q", a.Server.Name)
	}
	// Same addresses and port in both labs; each client must reach its own server.
	addr := netip.AddrPortFrom(a.Cfg.Server.Addr(), 7000).String()
	for _, l := range []*Lab{a, b} {
		ln, err := l.Server.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen in %s: %v", l.Name, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			io.WriteString(conn, l.Name)
		}()
	}
	for _, l := range []*Lab{a, b} {
		conn := mustDial(t, l.Client, addr)
		got, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != l.Name {
			t.Errorf("client of %s reached the server of %q", l.Name, got)
		}
	}
}

func TestSweepRemovesOnlyDeadLabs(t *testing.T) {
	testenv.RequireRoot(t)
	t.Parallel()
	prefix := fmt.Sprintf("sweeptest%d", time.Now().UnixNano()%1e6)
	live := NewT(t, Config{Name: prefix})

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s-%d-abcdef-client", prefix, dead.Process.Pid)
	if _, err := createNS(nil, stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeNS(stale) })
	orphan := exec.Command("ip", "netns", "exec", stale, "sleep", "60")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orphan.Process.Kill() })
	// `ip netns exec` enters the namespace only after it has started; a
	// process not yet inside is not Sweep's to kill.
	testenv.Eventually(t, "orphan inside the stale namespace", func() bool {
		return inNamespace(orphan.Process.Pid, filepath.Join(netnsDir, stale))
	})

	if err := Sweep(prefix); err != nil {
		t.Fatal(err)
	}
	if err := orphan.Wait(); err == nil {
		t.Error("process in the swept namespace survived")
	}
	left := namespacesWithPrefix(t, prefix)
	if want := []string{live.Client.Name, live.Fwd.Name, live.Server.Name}; !sameSet(left, want) {
		t.Errorf("after Sweep namespaces %v remain, want only the live lab's %v", left, want)
	}
	if err := Sweep(""); err == nil {
		t.Error("Sweep with an empty prefix succeeded; it would match every lab")
	}
}

func TestCreatorPID(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"splab-123-abcdef-client", 123, true},
		{"splab-123-abcdef", 0, false},
		{"splab-x-123-abcdef-client", 0, false},
		{"other-123-abcdef-client", 0, false},
	} {
		pid, ok := creatorPID(tc.name, "splab")
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("creatorPID(%q) = %d, %v; want %d, %v", tc.name, pid, ok, tc.pid, tc.ok)
		}
	}
}

func TestConfigRejectsMismatchedAddresses(t *testing.T) {
	for name, mutate := range map[string]func(*Config){
		"different subnets": func(c *Config) { c.FwdClient = netip.MustParsePrefix("10.99.3.1/24") },
		"IPv6 in IPv4 slot": func(c *Config) { c.Client = netip.MustParsePrefix("fd99:1::5/64") },
		"same address":      func(c *Config) { c.Server6 = c.FwdServer6 },
		"overlapping sides": func(c *Config) {
			c.FwdServer, c.Server = netip.MustParsePrefix("10.99.1.3/24"), netip.MustParsePrefix("10.99.1.4/24")
		},
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: config accepted", name)
		}
	}
	if err := (Config{}).withDefaults().validate(); err != nil {
		t.Errorf("zero config with defaults rejected: %v", err)
	}
}

// mustListen listens on a free TCP port of addr inside ns.
func mustListen(tb testing.TB, ns *NS, addr netip.Addr) net.Listener {
	tb.Helper()
	ln, err := ns.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		tb.Fatalf("listen in %s: %v", ns.Name, err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

func mustDial(tb testing.TB, ns *NS, addr string) net.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := ns.Dial(ctx, "tcp", addr)
	if err != nil {
		tb.Fatalf("dial %s from %s: %v", addr, ns.Name, err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// echoOnce connects from ns to ln, bounces a message off it and returns the
// address the listener saw the connection come from.
func echoOnce(tb testing.TB, from *NS, ln net.Listener) netip.Addr {
	tb.Helper()
	peer := make(chan netip.Addr, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(peer)
			return
		}
		defer conn.Close()
		peer <- conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		io.Copy(conn, conn)
	}()
	conn := mustDial(tb, from, ln.Addr().String())
	msg := []byte("hello through the lab")
	if _, err := conn.Write(msg); err != nil {
		tb.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		tb.Fatalf("echo = %q, %v; want %q", got, err, msg)
	}
	return <-peer
}

// udpReceiver counts the datagrams arriving at a socket.
type udpReceiver struct {
	addr     string
	received atomic.Uint64
}

func (r *udpReceiver) count() uint64 { return r.received.Load() }

func (r *udpReceiver) waitFor(tb testing.TB, n uint64) {
	tb.Helper()
	testenv.Eventually(tb, fmt.Sprintf("%d datagrams received", n), func() bool { return r.count() >= n })
}

func listenUDP(tb testing.TB, ns *NS, addr netip.Addr) *udpReceiver {
	tb.Helper()
	pc, err := ns.ListenPacket("udp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pc.Close() })
	// A buffer far larger than the test's bursts, so that every datagram
	// missing is one the loss program dropped.
	raw, err := pc.(*net.UDPConn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var sockErr error
	raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	})
	if sockErr != nil {
		tb.Fatal(sockErr)
	}
	r := &udpReceiver{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			r.received.Add(1)
		}
	}()
	return r
}

func dialUDP(tb testing.TB, ns *NS, addr string) net.Conn {
	tb.Helper()
	conn, err := ns.Dial(context.Background(), "udp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

func sendDatagrams(tb testing.TB, conn net.Conn, n int) {
	tb.Helper()
	msg := make([]byte, 64)
	for i := range n {
		if _, err := conn.Write(msg); err != nil {
			tb.Fatalf("datagram %d: %v", i, err)
		}
	}
}

// transferRate sends size bytes over TCP from one namespace to a listener on
// addr in another and returns the rate in bit/s seen by the receiver.
func transferRate(tb testing.TB, from, to *NS, addr netip.Addr, size int64) float64 {
	tb.Helper()
	ln := mustListen(tb, to, addr)
	type result struct {
		n   int64
		dur time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		first := make([]byte, 1)
		if _, err := io.ReadFull(conn, first); err != nil {
			done <- result{err: err}
			return
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, conn)
		done <- result{n + 1, time.Since(start), err}
	}()
	conn := mustDial(tb, from, ln.Addr().String())
	if _, err := io.CopyN(conn, zeros{}, size); err != nil {
		tb.Fatal(err)
	}
	conn.Close()
	r := <-done
	if r.err != nil || r.n != size {
		tb.Fatalf("received %d of %d bytes: %v", r.n, size, r.err)
	}
	return float64(r.n-1) * 8 / r.dur.Seconds()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// tcxPrograms lists the programs attached at end's interface.
func tcxPrograms(tb testing.TB, end End, attach ebpf.AttachType) []link.AttachedProgram {
	tb.Helper()
	progs, err := end.TCXPrograms(attach)
	if err != nil {
		tb.Fatal(err)
	}
	return progs
}

// rootQdisc names the qdisc at the root of end's interface.
func rootQdisc(tb testing.TB, end End) string {
	tb.Helper()
	h, err := end.NS.Netlink()
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(end.Interface)
	if err != nil {
		tb.Fatal(err)
	}
	qdiscs, err := h.QdiscList(l)
	if err != nil {
		tb.Fatal(err)
	}
	for _, q := range qdiscs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			return q.Type()
		}
	}
	return ""
}

func namespacesWithPrefix(tb testing.TB, prefix string) []string {
	tb.Helper()
	matches, err := filepath.Glob(filepath.Join(netnsDir, prefix+"-*"))
	if err != nil {
		tb.Fatal(err)
	}
	for i, m := range matches {
		matches[i] = filepath.Base(m)
	}
	return matches
}

func readTrimmed(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func inNamespace(pid int, nsPath string) bool {
	var ns, proc unix.Stat_t
	if unix.Stat(nsPath, &ns) != nil || unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &proc) != nil {
		return false
	}
	return ns.Dev == proc.Dev && ns.Ino == proc.Ino
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			return false
		}
	}
	return true
}

// Tests of the sockmap engine on real loopback TCP connections: conformance, bulk integrity, flow control, exact limits across give-backs, FIN and RST, scale, fallback.

package sockmap_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/engine/sockmap"
	"github.com/splicer/splicer/internal/testenv"
)

// newEngine returns a sockmap engine closed at the end of the test.
func newEngine(tb testing.TB, opts sockmap.Options) *sockmap.Engine {
	tb.Helper()
	testenv.RequireRoot(tb)
	e, err := sockmap.New(opts, testenv.Logger(tb))
	if err != nil {
		tb.Fatalf("sockmap.New: %v", err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func readExactly(tb testing.TB, c *net.TCPConn, n int) []byte {
	tb.Helper()
	b := make([]byte, n)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, newEngine(t, sockmap.Options{}))
}

// TestBulkBothWays moves 256 MiB each way at once and compares digests.
func TestBulkBothWays(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	c := enginetest.NewPair(t)
	const n = 256 << 20
	// The streams start once the sockets are in the map: a stream that
	// ended before (a loaded machine can delay the splice past a
	// 256 MiB transfer) is rightly left to user space, and the kernel's
	// share below would say nothing.
	opts := engine.Both(0)
	spliced := make(chan struct{})
	opts.OnSpliced = func() { close(spliced) }
	res := enginetest.SpliceAsync(t, e, c.Pair, opts)
	select {
	case <-spliced:
	case <-time.After(testenv.Wait):
		t.Fatal("not spliced")
	}
	up, down := enginetest.Random(n, 11), enginetest.Random(n, 12)
	gotUp, gotDown := make(chan [32]byte, 1), make(chan [32]byte, 1)
	go enginetest.SendThenClose(t, c.Client, up)
	go enginetest.SendThenClose(t, c.Server, down)
	go func() { gotUp <- enginetest.DigestAll(t, c.Server) }()
	go func() { gotDown <- enginetest.DigestAll(t, c.Client) }()
	if <-gotUp != sha256.Sum256(up) {
		t.Error("upstream received a different stream than the client sent")
	}
	if <-gotDown != sha256.Sum256(down) {
		t.Error("client received a different stream than the server sent")
	}
	r := enginetest.Wait(t, res)
	if r.End != engine.EndEOF || r.Moved != [2]int64{n, n} || r.EOF != [2]bool{true, true} {
		t.Errorf("result %+v, want EOF both ways with %d bytes each", r, n)
	}
	// The kernel carries the bulk of it; where the map refuses a socket
	// for a while (memory pressure on a loaded machine), the direction
	// rightly continues in user space, so "the bulk" is a quarter here,
	// not all (it fell to 45-48% in 3 of 30 runs at load 5-10).
	if st := e.Stats(); st.KernelBytes < n/4 {
		t.Errorf("kernel redirected %d bytes, want at least a quarter of the %d bytes down", st.KernelBytes, n)
	}
}

// TestSlowReader: a client reading 1 KiB per millisecond keeps receiving,
// while the server cannot push more than the engine's window plus socket
// buffers into the forwarder: the server's connection feels the pressure
// instead of the forwarder's memory.
func TestSlowReader(t *testing.T) {
	const window = 1 << 20
	e := newEngine(t, sockmap.Options{Window: window})
	c := enginetest.NewPair(t)
	res := enginetest.SpliceAsync(t, e, c.Pair, engine.Options{Up: engine.DirOptions{Mode: engine.Watch}})
	const total = 128 << 20
	data := enginetest.Random(total, 13)
	var mu sync.Mutex
	sent := 0
	go func() {
		for off := 0; off < total; off += 64 << 10 {
			n, err := c.Server.Write(data[off : off+64<<10])
			mu.Lock()
			sent += n
			mu.Unlock()
			if err != nil {
				return
			}
		}
		c.Server.CloseWrite()
	}()

	// Slow phase: 1 KiB per millisecond for a second.
	got := make([]byte, 0, total)
	buf := make([]byte, 1024)
	tick := time.NewTicker(time.Millisecond)
	for start := time.Now(); time.Since(start) < time.Second; {
		<-tick.C
		n, err := io.ReadFull(c.Client, buf)
		if err != nil {
			t.Fatalf("slow read: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	tick.Stop()
	mu.Lock()
	pushed := sent
	mu.Unlock()
	// Socket buffers on the path hold at most a few MiB each; without flow
	// control the kernel would take the whole 128 MiB at once.
	if pushed > 48<<20 {
		t.Errorf("server pushed %d MiB while the client read %d KiB: forwarder memory is not bounded", pushed>>20, len(got)>>10)
	}
	if len(got) < 256<<10 {
		t.Errorf("slow client received only %d bytes in a second: stalled", len(got))
	}
	if e.Stats().Pauses == 0 {
		t.Error("source was never paused")
	}

	// Fast phase: the rest arrives intact.
	rest, err := io.ReadAll(c.Client)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	if !bytes.Equal(got, data) {
		t.Fatalf("client received %d bytes, not the %d bytes sent", len(got), total)
	}
	if r := enginetest.Wait(t, res); r.End != engine.EndEOF || r.Moved[engine.Down] != total {
		t.Errorf("result %+v, want EOF after %d bytes", r, total)
	}
}

// TestKeepAliveCycles runs 100 request/response cycles on one pair, each
// response spliced with an exact byte limit and the next request watched;
// bytes past each limit stay on the upstream socket, and every boundary is
// exact. Every tenth response goes through the pipe engine instead.
func TestKeepAliveCycles(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	pipeEngine := pipe.New(0)
	t.Cleanup(func() { pipeEngine.Close() })
	c := enginetest.NewPair(t)
	up := c.Pair.Upstream()
	for i := range 100 {
		req := []byte("request " + strings.Repeat("r", i))
		if _, err := c.Client.Write(req); err != nil {
			t.Fatal(err)
		}
		if got := readExactly(t, c.Pair.Client, len(req)); !bytes.Equal(got, req) {
			t.Fatalf("cycle %d: proxy read %q", i, got)
		}
		c.Pair.Client.SetReadDeadline(time.Time{})
		if _, err := up.Write(req); err != nil {
			t.Fatal(err)
		}
		readExactly(t, c.Server, len(req))

		body := enginetest.Random(1+(i*7919)%300000, uint64(i))
		extra := []byte("extra after the body " + strings.Repeat("x", i%13))
		go func() {
			c.Server.Write(body)
			if i%3 == 0 {
				time.Sleep(time.Millisecond) // sometimes a separate segment
			}
			c.Server.Write(extra)
		}()
		opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, Down: engine.DirOptions{Mode: engine.Forward, Limit: int64(len(body))}}
		var eng engine.Engine = e
		if i%10 == 9 {
			eng = pipeEngine // the sockets handed back are plain sockets any engine can take
		}
		res := enginetest.SpliceAsync(t, eng, c.Pair, opts)
		if got := readExactly(t, c.Client, len(body)); !bytes.Equal(got, body) {
			t.Fatalf("cycle %d: client received a different body", i)
		}
		r := enginetest.Wait(t, res)
		if r.End != engine.EndLimit || r.Dir != engine.Down || r.Moved[engine.Down] != int64(len(body)) {
			t.Fatalf("cycle %d: result %+v, want limit down after %d bytes", i, r, len(body))
		}
		if got := readExactly(t, up, len(extra)); !bytes.Equal(got, extra) {
			t.Fatalf("cycle %d: bytes past the limit were %q, want %q", i, got, extra)
		}
		up.SetReadDeadline(time.Time{})
	}
	c.Client.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := c.Client.Read(make([]byte, 1)); n != 0 {
		t.Fatal("client received bytes past the last limit")
	}
}

// TestGiveBackOnData: a response streams down while the client's next
// request ends the splice; nothing of either is lost, and the response
// resumes in the next splice.
func TestGiveBackOnData(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	c := enginetest.NewPair(t)
	data := enginetest.Random(8<<20, 14)
	go enginetest.SendThenClose(t, c.Server, data)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(c.Client); got <- b }()
	installed := make(chan struct{})
	opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, OnSpliced: func() { close(installed) }}
	res := enginetest.SpliceAsync(t, e, c.Pair, opts)
	<-installed
	c.Client.Write([]byte("next"))
	r := enginetest.Wait(t, res)
	if r.End != engine.EndData && r.End != engine.EndEOF {
		t.Fatalf("result %+v, want data up (or EOF if the response was already done)", r)
	}
	if r.End == engine.EndData {
		if b := readExactly(t, c.Pair.Client, 4); string(b) != "next" {
			t.Fatalf("watched bytes %q", b)
		}
		c.Pair.Client.SetReadDeadline(time.Time{})
		r2 := enginetest.Wait(t, enginetest.SpliceAsync(t, e, c.Pair, engine.Options{Up: engine.DirOptions{Mode: engine.Hold}}))
		if r2.End != engine.EndEOF || r.Moved[engine.Down]+r2.Moved[engine.Down] != int64(len(data)) {
			t.Fatalf("second splice %+v after %+v", r2, r)
		}
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("client received %d bytes, want the %d bytes sent", len(b), len(data))
	}
}

// TestOneWayFINAndRST checks FIN and RST in each direction when only that
// direction is forwarded (by the kernel), the other watched.
func TestOneWayFINAndRST(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	for _, d := range []engine.Direction{engine.Up, engine.Down} {
		for _, reset := range []bool{false, true} {
			c := enginetest.NewPair(t)
			src, dst := c.Client, c.Server
			if d == engine.Down {
				src, dst = c.Server, c.Client
			}
			var opts engine.Options
			if d == engine.Up {
				opts.Down.Mode = engine.Hold
			} else {
				opts.Up.Mode = engine.Hold
			}
			res := enginetest.SpliceAsync(t, e, c.Pair, opts)
			msg := enginetest.Random(200000, 15)
			src.Write(msg)
			if got := readExactly(t, dst, len(msg)); !bytes.Equal(got, msg) {
				t.Fatalf("%v: bytes before the end differ", d)
			}
			if reset {
				engine.ResetConn(src)
			} else {
				src.CloseWrite()
			}
			r := enginetest.Wait(t, res)
			c.Pair.CloseConns() // as the forwarder does once the splice ends the pair
			dst.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := dst.Read(make([]byte, 1))
			switch {
			case reset && (r.End != engine.EndReset || !errors.Is(err, syscall.ECONNRESET)):
				t.Errorf("%v reset: end %v, peer read %d %v; want reset both", d, r.End, n, err)
			case !reset && (r.End != engine.EndEOF || !r.EOF[d] || n != 0 || err != io.EOF):
				t.Errorf("%v FIN: result %+v, peer read %d %v; want EOF", d, r, n, err)
			}
		}
	}
}

// TestManyPairs splices up to 10,000 pairs at once in one engine. The far
// ends (client and server applications) live in two helper processes, so
// this process holds only the pairs' two descriptors each.
func TestManyPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 pairs")
	}
	testenv.RequireRoot(t)
	pairs := 10000
	if limit := raiseNoFile(t, 2*uint64(pairs)+200); limit < 2*uint64(pairs)+200 {
		pairs = int(limit-200) / 2
		t.Logf("RLIMIT_NOFILE hard limit %d (not raisable here): %d pairs at once instead of 10,000", limit, pairs)
	}
	e := newEngine(t, sockmap.Options{})
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	servers := startHelper(t, "servers", pairs, "")
	serverAddr, err := net.ResolveTCPAddr("tcp", servers.Line(t))
	if err != nil {
		t.Fatal(err)
	}
	clients := startHelper(t, "clients", pairs, l.Addr().String())

	var spliced sync.WaitGroup
	spliced.Add(pairs)
	results := make(chan error, pairs)
	var conns []*net.TCPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range pairs {
		fc, err := l.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		var idx [4]byte
		if _, err := io.ReadFull(fc, idx[:]); err != nil {
			t.Fatal(err)
		}
		fu, err := net.DialTCP("tcp", nil, serverAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fu.Write(idx[:]); err != nil { // the proxy forwards the request
			t.Fatal(err)
		}
		conns = append(conns, fc, fu)
		p := engine.NewPair(uint64(len(conns)), "many", fc)
		p.SetUpstream(fu)
		want := int64(len(manyPairsMessage(binary.BigEndian.Uint32(idx[:]))))
		opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, OnSpliced: spliced.Done}
		go func() {
			r, err := e.Splice(context.Background(), p, opts)
			switch {
			case err != nil:
				spliced.Done()
				results <- err
			case r.End != engine.EndEOF || r.Moved[engine.Down] != want:
				results <- fmt.Errorf("pair ended %+v, want EOF after %d bytes", r, want)
			default:
				results <- nil
			}
		}()
	}
	spliced.Wait()
	if a := e.Stats().Active; a != int64(pairs) {
		t.Errorf("%d splices active, want all %d at once", a, pairs)
	}
	servers.Send(t, "go") // every pair is spliced: the servers answer now
	bad := 0
	for range pairs {
		if err := <-results; err != nil {
			if bad++; bad <= 3 {
				t.Error(err)
			}
		}
	}
	if got := clients.Line(t); got != fmt.Sprintf("ok %d", pairs) {
		t.Errorf("clients report %q, want every stream intact", got)
	}
	if bad > 0 {
		t.Fatalf("%d of %d pairs failed", bad, pairs)
	}
}

// manyPairsMessage is what server i sends, and client i must receive.
func manyPairsMessage(i uint32) []byte { return enginetest.Random(500+int(i%3000), uint64(i)) }

// startHelper starts a child process playing the far ends of TestManyPairs.
func startHelper(tb testing.TB, role string, n int, addr string) *testenv.Helper {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestManyPairsHelper$")
	return testenv.StartHelper(tb, cmd, "SOCKMAP_HELPER="+role, "SOCKMAP_N="+strconv.Itoa(n), "SOCKMAP_ADDR="+addr)
}

// TestManyPairsHelper is a far-end process of TestManyPairs: "servers"
// accepts n connections, waits for "go", then answers each; "clients" makes
// n connections and checks every answer.
func TestManyPairsHelper(t *testing.T) {
	role := os.Getenv("SOCKMAP_HELPER")
	if role == "" {
		t.Skip("helper process of TestManyPairs")
	}
	n, _ := strconv.Atoi(os.Getenv("SOCKMAP_N"))
	raiseNoFile(t, uint64(n)+200)
	if role == "servers" {
		helperServers(t, n)
	} else {
		helperClients(t, n, os.Getenv("SOCKMAP_ADDR"))
	}
}

func helperServers(t *testing.T, n int) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("> %s\n", l.Addr())
	conns := make([]*net.TCPConn, n)
	idx := make([]uint32, n)
	for i := range conns {
		c, err := l.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		var b [4]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatal(err)
		}
		conns[i], idx[i] = c, binary.BigEndian.Uint32(b[:])
	}
	bufio.NewReader(os.Stdin).ReadString('\n') // "go"
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Write(manyPairsMessage(idx[i]))
			c.CloseWrite()
			io.Copy(io.Discard, c)
			c.Close()
		}()
	}
	wg.Wait()
}

func helperClients(t *testing.T, n int, addr string) {
	raddr, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		c, err := net.DialTCP("tcp", nil, raddr)
		if err != nil {
			t.Fatal(err)
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i))
		c.Write(b[:])
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := io.ReadAll(c)
			if err == nil && bytes.Equal(got, manyPairsMessage(uint32(i))) {
				ok.Add(1)
			}
			c.Close()
		}()
	}
	wg.Wait()
	fmt.Printf("> ok %d\n", ok.Load())
}

// raiseNoFile raises the soft RLIMIT_NOFILE toward n, as far as the hard
// limit allows (or further if the process may raise that), and returns the
// soft limit in force.
func raiseNoFile(tb testing.TB, n uint64) uint64 {
	tb.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		tb.Fatal(err)
	}
	if old.Cur >= n {
		return old.Cur
	}
	tb.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	if unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: max(n, old.Max)}) == nil {
		return n
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: old.Max, Max: old.Max}); err != nil {
		tb.Fatal(err)
	}
	return old.Max
}

// TestFallbackWhenMapsFull: a pair the engine cannot take gets a
// FallbackError with no byte touched, and the pipe engine splices it.
func TestFallbackWhenMapsFull(t *testing.T) {
	e := newEngine(t, sockmap.Options{MaxPairs: 1})
	first := enginetest.NewPair(t)
	installed := make(chan struct{})
	busy := enginetest.SpliceAsync(t, e, first.Pair, engine.Options{OnSpliced: func() { close(installed) }})
	<-installed // the first pair holds the only slot

	c := enginetest.NewPair(t)
	c.Server.Write([]byte("queued before the splice"))
	_, err := e.Splice(context.Background(), c.Pair, engine.Both(0))
	if !engine.IsFallback(err) {
		t.Fatalf("Splice on full maps: %v, want a FallbackError", err)
	}
	if e.Stats().Fallbacks == 0 {
		t.Error("fallback not counted")
	}
	p := pipe.New(0)
	t.Cleanup(func() { p.Close() })
	res := enginetest.SpliceAsync(t, p, c.Pair, engine.Both(0))
	c.Server.CloseWrite()
	c.Client.CloseWrite()
	if got, _ := io.ReadAll(c.Client); string(got) != "queued before the splice" {
		t.Fatalf("after fallback the client got %q", got)
	}
	enginetest.Wait(t, res)
	first.Client.CloseWrite()
	first.Server.CloseWrite()
	enginetest.Wait(t, busy)
}

// TestFallbackWithoutPrivilege: without CAP_BPF and CAP_NET_ADMIN the engine
// does not load, and says which capability is missing.
func TestFallbackWithoutPrivilege(t *testing.T) {
	testenv.RequireRoot(t)
	if os.Getenv("SOCKMAP_UNPRIVILEGED_CHILD") == "1" {
		return
	}
	// The child runs as nobody, who cannot enter the go build cache: run a
	// copy of this test binary from a directory nobody can read.
	bin := copyExecutable(t)
	cmd := exec.Command(bin, "-test.run=^TestUnprivilegedChild$", "-test.v")
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), "SOCKMAP_UNPRIVILEGED_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "CAP_BPF") || !strings.Contains(string(out), "CAP_NET_ADMIN") {
		t.Fatalf("error does not name the missing capabilities:\n%s", out)
	}
}

// copyExecutable copies the running test binary into a fresh directory
// everyone may enter, removed after the test.
func copyExecutable(tb testing.TB) string {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sockmap-nopriv-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, "sockmap.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// TestUnprivilegedChild runs as nobody, started by TestFallbackWithoutPrivilege.
func TestUnprivilegedChild(t *testing.T) {
	if os.Getenv("SOCKMAP_UNPRIVILEGED_CHILD") != "1" {
		t.Skip("helper of TestFallbackWithoutPrivilege")
	}
	errA := sockmap.Available()
	_, errN := sockmap.New(sockmap.Options{}, nil)
	if errA == nil || errN == nil {
		t.Fatalf("Available() = %v, New() = %v; want both to fail without privilege", errA, errN)
	}
	t.Logf("Available: %v", errA)
}

// TestLimitUpWithDownForwarded: a byte limit on the way up while the way
// down forwards too (one of them is pumped in user space); the limit is
// exact and the rest stays on the client socket.
func TestLimitUpWithDownForwarded(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	c := enginetest.NewPair(t)
	const n = 123457
	up := enginetest.Random(n+999, 16)
	go c.Client.Write(up)
	down := enginetest.Random(50000, 17)
	go c.Server.Write(down)
	res := enginetest.SpliceAsync(t, e, c.Pair, engine.Options{Up: engine.DirOptions{Mode: engine.Forward, Limit: n}})
	if got := readExactly(t, c.Server, n); !bytes.Equal(got, up[:n]) {
		t.Fatal("server received different bytes before the limit")
	}
	r := enginetest.Wait(t, res)
	if r.End != engine.EndLimit || r.Dir != engine.Up || r.Moved[engine.Up] != n {
		t.Fatalf("result %+v, want limit up after %d bytes", r, n)
	}
	if got := readExactly(t, c.Pair.Client, 999); !bytes.Equal(got, up[n:]) {
		t.Fatal("bytes past the limit not left on the client socket")
	}
	if got := readExactly(t, c.Client, int(r.Moved[engine.Down])); !bytes.Equal(got, down[:r.Moved[engine.Down]]) {
		t.Fatal("client received different bytes down")
	}
}

// TestLiveCounters: the pair's byte counters move while it is spliced, for
// /flows, not only when the splice ends.
func TestLiveCounters(t *testing.T) {
	e := newEngine(t, sockmap.Options{StatsInterval: 10 * time.Millisecond})
	c := enginetest.NewPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Splice(ctx, c.Pair, engine.Options{Up: engine.DirOptions{Mode: engine.Hold}}); close(done) }()
	msg := enginetest.Random(1<<20, 18)
	c.Server.Write(msg)
	readExactly(t, c.Client, len(msg))
	deadline := time.Now().Add(10 * time.Second)
	for c.Pair.Bytes(engine.Down) != int64(len(msg)) {
		if time.Now().After(deadline) {
			t.Fatalf("pair counter at %d while spliced, want %d", c.Pair.Bytes(engine.Down), len(msg))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := c.Pair.Bytes(engine.Down); got != int64(len(msg)) {
		t.Errorf("pair counter %d after the splice, want %d", got, len(msg))
	}
}

// TestLimitUpInKernel: a byte limit on the way up forwarded by the kernel
// (down held), with the bytes past it already queued in the same segments.
func TestLimitUpInKernel(t *testing.T) {
	e := newEngine(t, sockmap.Options{})
	for _, pre := range []bool{false, true} {
		c := enginetest.NewPair(t)
		const n = 77777
		up := enginetest.Random(n+4321, 19)
		var res <-chan engine.Result
		opts := engine.Options{Up: engine.DirOptions{Mode: engine.Forward, Limit: n}, Down: engine.DirOptions{Mode: engine.Hold}}
		if pre { // queued before the splice: predrain moves part, the kernel the rest
			c.Client.Write(up[:1000])
			readExactly(t, c.Pair.Client, 10) // the proxy read part of a segment
			up = up[10:]
		}
		res = enginetest.SpliceAsync(t, e, c.Pair, opts)
		if pre {
			go c.Client.Write(up[990:])
		} else {
			go c.Client.Write(up)
		}
		if got := readExactly(t, c.Server, n); !bytes.Equal(got, up[:n]) {
			t.Fatalf("pre=%v: server received different bytes before the limit", pre)
		}
		r := enginetest.Wait(t, res)
		if r.End != engine.EndLimit || r.Moved[engine.Up] != n {
			t.Fatalf("pre=%v: result %+v, want limit up after %d bytes", pre, r, n)
		}
		rest := len(up) - n
		if got := readExactly(t, c.Pair.Client, rest); !bytes.Equal(got, up[n:]) {
			t.Fatalf("pre=%v: bytes past the limit not left on the client socket", pre)
		}
	}
}

// TestIdleNotWhileReaderReads: a paused direction whose reader still takes
// bytes is not idle.
func TestIdleNotWhileReaderReads(t *testing.T) {
	e := newEngine(t, sockmap.Options{Window: 64 << 10})
	c := enginetest.NewPair(t)
	data := enginetest.Random(8<<20, 20)
	go enginetest.SendThenClose(t, c.Server, data)
	opts := engine.Options{Up: engine.DirOptions{Mode: engine.Hold}, IdleTimeout: 100 * time.Millisecond}
	res := enginetest.SpliceAsync(t, e, c.Pair, opts)
	got := make([]byte, 0, len(data))
	buf := make([]byte, 16<<10)
	for start := time.Now(); time.Since(start) < 400*time.Millisecond; {
		n, err := c.Client.Read(buf) // slowly: 16 KiB per 5 ms
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		time.Sleep(5 * time.Millisecond)
	}
	c.Client.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(c.Client)
	if err != nil {
		t.Fatalf("after the slow phase: %v", err)
	}
	got = append(got, rest...)
	if r := enginetest.Wait(t, res); r.End != engine.EndEOF {
		t.Errorf("end %v while the reader was reading, want EOF", r.End)
	}
	if !bytes.Equal(got, data) {
		t.Error("client received a different stream")
	}
}

// TestAvailable: as root on this kernel the engine can load.
func TestAvailable(t *testing.T) {
	testenv.RequireRoot(t)
	if err := sockmap.Available(); err != nil {
		t.Fatalf("Available: %v", err)
	}
}

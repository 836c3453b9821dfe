// Lab test of what splicing saves: while 1 GiB crosses a spliced pair, sent and received by helper processes in the client and server namespaces, the forwarder process (this one) spends little CPU.

package ip

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
)

// TestEngineCPU1GiB: the client helper sends 1 GiB through a spliced pair
// to the server helper, which counts it. The forwarder process's CPU time
// (user + system, getrusage) over the transfer must stay under a quarter of
// the transfer's wall time, a loose bound: the datapath runs in softirq
// context, charged to whichever task the packet interrupted, and the
// forwarder only polls counters four times a second.
func TestEngineCPU1GiB(t *testing.T) {
	const size = 1 << 30
	el := newEngineLab(t, Options{MaxPairs: 16})
	port := uint16(el.port.Add(1))
	fwdAddr := netip.AddrPortFrom(el.l.Cfg.FwdClient.Addr(), port).String()
	srvAddr := netip.AddrPortFrom(el.l.Cfg.Server.Addr(), port).String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sink := startStreamHelper(t, el.l.Server.Command(ctx, os.Args[0], "-test.run=^TestEngineStreamHelper$"), "sink", srvAddr, 0)
	fln, err := el.l.Fwd.Listen("tcp", fwdAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fln.Close()
	source := startStreamHelper(t, el.l.Client.Command(ctx, os.Args[0], "-test.run=^TestEngineStreamHelper$"), "source", fwdAddr, size)
	fa, err := fln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fb, err := el.l.Fwd.Dial(ctx, "tcp", srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	p := engine.NewPair(uint64(port), "lab", fa.(*net.TCPConn))
	p.SetUpstream(fb.(*net.TCPConn))
	t.Cleanup(func() { fa.Close(); fb.Close() })
	done := el.splice(t, ctx, labPair{p: p}, engine.Both(0))

	cpu0, start := processCPU(t), time.Now()
	source.Send(t, "go")
	got := source.Line(t) // the source's "sent" once the sink closed
	wall, cpu := time.Since(start), processCPU(t)-cpu0
	if got != "sent" {
		t.Fatalf("source said %q", got)
	}
	if n := sink.Line(t); n != strconv.Itoa(size) {
		t.Fatalf("the sink received %s bytes, want %d", n, size)
	}
	result(t, done, engine.EndEOF)
	t.Logf("1 GiB in %v (%.0f MB/s); forwarder CPU %v, %.1f%% of the transfer time",
		wall.Round(time.Millisecond), float64(size)/wall.Seconds()/1e6, cpu.Round(time.Millisecond), 100*cpu.Seconds()/wall.Seconds())
	if cpu > wall/4 {
		t.Errorf("the forwarder spent %v of CPU while 1 GiB crossed in %v", cpu, wall)
	}
}

// processCPU is this process's user + system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startStreamHelper starts cmd (this test binary in a namespace) as a
// sink listening on addr or a source dialling addr to send n bytes, and
// waits for its "ready".
func startStreamHelper(tb testing.TB, cmd *exec.Cmd, role, addr string, n int64) *testenv.Helper {
	tb.Helper()
	h := testenv.StartHelper(tb, cmd, "IP_HELPER="+role, "IP_ADDR="+addr, "IP_N="+strconv.FormatInt(n, 10))
	if l := h.Line(tb); l != "ready" {
		tb.Fatalf("helper said %q", l)
	}
	return h
}

// listenReady listens on addr in a helper process and tells the test,
// which waits for "> ready" on the helper's output, that it may connect.
func listenReady(tb testing.TB, addr string) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	fmt.Println("> ready")
	return l
}

// TestEngineStreamHelper is the helper process of TestEngineCPU1GiB:
// "sink" accepts one connection on IP_ADDR, reads it to EOF, prints the
// count and closes; "source" dials IP_ADDR, waits for "go" on stdin,
// sends IP_N bytes, half-closes, reads to EOF and prints "sent".
func TestEngineStreamHelper(t *testing.T) {
	role, addr := os.Getenv("IP_HELPER"), os.Getenv("IP_ADDR")
	if role == "" {
		t.Skip("helper process of TestEngineCPU1GiB")
	}
	switch role {
	case "sink":
		l := listenReady(t, addr)
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("> %d\n", n)
		c.Close()
	case "source":
		n, _ := strconv.ParseInt(os.Getenv("IP_N"), 10, 64)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("> ready")
		if s := bufio.NewScanner(os.Stdin); !s.Scan() || s.Text() != "go" {
			t.Fatal("no go")
		}
		buf := make([]byte, 1<<20)
		for sent := int64(0); sent < n; {
			w, err := c.Write(buf[:min(int64(len(buf)), n-sent)])
			if err != nil {
				t.Fatal(err)
			}
			sent += int64(w)
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatal(err)
		}
		fmt.Println("> sent")
	}
}

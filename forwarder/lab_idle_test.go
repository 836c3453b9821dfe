// Lab test of many idle pairs spliced by ip through one tcp listener: once spliced a pair keeps no goroutine and no descriptor in the forwarder, and still carries bytes.

package forwarder_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestLabIdlePairsKeepNoGoroutineOrDescriptor: 2,000 idle pairs of a tcp
// listener on ip, spliced until they close. With all of them spliced the
// forwarder has no more goroutines and no more descriptors than with one
// (a few dozen of slack for what the engine starts once, far below one
// per pair); then every pair still echoes a message both ways.
// SPLICER_HEAPPROFILE=FILE writes a heap profile of the process, every
// allocation sampled, with the pairs spliced.
func TestLabIdlePairsKeepNoGoroutineOrDescriptor(t *testing.T) {
	const n, slack = 2000, 64
	profile := os.Getenv("SPLICER_HEAPPROFILE")
	if profile != "" {
		runtime.MemProfileRate = 1
	}
	l := lab.NewT(t, lab.DefaultConfig())
	servers := serverConns(t, l, httplab.ServerAddr(l, 9851))
	lc := tcpListener("idle", httplab.FwdAddr(l, 7851), httplab.ServerAddr(l, 9851))
	lc.IdleTimeout = 0
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, ip.Name)

	// One pair first: what the engine starts once (its tickers, the
	// datapath's readers and descriptors) is not per pair.
	c0 := httplab.Dial(t, l, lf.Addr("idle").String())
	s0 := accept(t, servers)
	lf.waitFlow(t, "idle", "the first pair spliced by ip", func(f forwarder.Flow) bool { return f.State == "spliced" && f.Engine == ip.Name })
	g0, fd0 := runtime.NumGoroutine(), testenv.OpenFDs(t)

	clients := make([]*net.TCPConn, n)
	srvs := make([]*net.TCPConn, n)
	for i := range n {
		clients[i] = httplab.Dial(t, l, lf.Addr("idle").String())
		srvs[i] = accept(t, servers)
	}
	// The test holds both ends of each pair: 2n descriptors of its own.
	spliced := func() int {
		flows, err := lf.flows()
		if err != nil {
			return 0
		}
		k := 0
		for _, f := range flows {
			if f.State == "spliced" && f.Engine == ip.Name {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(60 * time.Second)
	var fds, g, k int
	for {
		fds, g, k = testenv.OpenFDs(t)-2*n, runtime.NumGoroutine(), spliced()
		if (k == n+1 && fds-fd0 <= slack && g-g0 <= slack) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d idle pairs spliced: %d descriptors besides the test's ends (%d with one pair), %d goroutines (%d with one pair)", k, fds, fd0, g, g0)
	if k != n+1 {
		t.Fatalf("%d of %d pairs spliced by ip after 60 s", k, n+1)
	}
	if fds-fd0 > slack {
		t.Errorf("with %d pairs spliced the forwarder holds %d descriptors more than with one: want at most %d, none per pair", n, fds-fd0, slack)
	}
	if g-g0 > slack {
		t.Errorf("with %d pairs spliced the process runs %d goroutines more than with one: want at most %d, none per pair", n, g-g0, slack)
	}
	if profile != "" {
		writeHeapProfile(t, profile)
	}
	for i := range n {
		echoThrough(t, clients[i], srvs[i], uint64(i))
	}
	c0.Close()
	s0.Close()
}

func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// echoThrough sends an 8-byte message from the client to the server end
// of a pair and back.
func echoThrough(tb testing.TB, c, s *net.TCPConn, v uint64) {
	tb.Helper()
	var msg, got [8]byte
	binary.BigEndian.PutUint64(msg[:], v)
	for _, d := range []struct{ from, to *net.TCPConn }{{c, s}, {s, c}} {
		d.to.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := d.from.Write(msg[:]); err != nil {
			tb.Fatalf("pair %d: %v", v, err)
		}
		if _, err := io.ReadFull(d.to, got[:]); err != nil || !bytes.Equal(got[:], msg[:]) {
			tb.Fatalf("pair %d: read %x, %v; sent %x", v, got, err, msg)
		}
	}
}

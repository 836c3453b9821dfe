// Lab test of scale: 10,000 pairs spliced at once, their client and server ends held by helper processes (a process may hold at most 20,000 descriptors here), each echoing a message and closing to TIME_WAIT.

package ip

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
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
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("IP_PAIRS")); err == nil {
		n = v
	}
	el := newEngineLab(t, Options{MaxPairs: n + 64})
	port := uint16(el.port.Add(1))
	fwdAddr := netip.AddrPortFrom(el.l.Cfg.FwdClient.Addr(), port).String()
	srvAddr := netip.AddrPortFrom(el.l.Cfg.Server.Addr(), port).String()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	helperRun := "-test.run=^TestEngineManyHelper$"
	servers := startStreamHelper(t, el.l.Server.Command(ctx, os.Args[0], helperRun), "echo-servers", srvAddr, int64(n))
	fln, err := el.l.Fwd.Listen("tcp", fwdAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fln.Close()
	clients := startStreamHelper(t, el.l.Client.Command(ctx, os.Args[0], helperRun), "clients", fwdAddr, int64(n))

	// Accept, dial upstream, splice: at most 512 pairs' sockets open here
	// at a time.
	var spliced, ended atomic.Int64
	results := make(chan error, n)
	slots := make(chan struct{}, 512)
	start := time.Now()
	go func() {
		for i := range n {
			slots <- struct{}{}
			fa, err := fln.Accept()
			if err != nil {
				results <- err
				return
			}
			go func() {
				fb, err := el.l.Fwd.Dial(ctx, "tcp", srvAddr)
				if err != nil {
					<-slots
					results <- err
					return
				}
				p := engine.NewPair(uint64(i), "lab", fa.(*net.TCPConn))
				p.SetUpstream(fb.(*net.TCPConn))
				opts := engine.Both(0)
				opts.OnSpliced = func() { spliced.Add(1); <-slots }
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
				ended.Add(1)
				results <- err
			}()
		}
	}()
	if got := clients.Line(t); got != "connected" {
		t.Fatalf("clients said %q (%d pairs spliced, %d ended, after %v)", got, spliced.Load(), ended.Load(), time.Since(start))
	}
	for spliced.Load() < int64(n) {
		select {
		case err := <-results:
			t.Fatalf("a splice ended early: %v", err)
		case <-ctx.Done():
			t.Fatalf("%d of %d pairs spliced", spliced.Load(), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("%d pairs spliced in %v; %d in the table", n, time.Since(start).Round(time.Millisecond), len(el.e.dp.Pairs()))
	clients.Send(t, "go")
	if got := clients.Line(t); got != "ok" {
		t.Fatalf("clients said %q", got)
	}
	for range n {
		select {
		case err := <-results:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d splices ended", ended.Load(), n)
		}
	}
	_ = servers
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
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("> ready")
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

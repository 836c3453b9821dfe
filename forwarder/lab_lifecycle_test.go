// Lab tests of pairs over their life: 1,000 at once, graceful shutdown, and splice_after's move from control mode to an engine mid-stream.

package forwarder_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestLab1000ConcurrentPairs holds 1,000 pairs open through the default
// engine, exchanges a message on each at once, and checks every pair is
// counted closed and the active gauge is back to 0.
func TestLab1000ConcurrentPairs(t *testing.T) {
	t.Parallel()
	const pairs = 1000
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9301))
	lf := startLabForwarder(t, l, tcpListener("many", httplab.FwdAddr(l, 7301), httplab.ServerAddr(l, 9301)))
	addr := lf.Addr("many").String()

	conns := make([]*net.TCPConn, pairs)
	for i := range conns {
		conns[i] = httplab.Dial(t, l, addr)
	}
	testenv.EventuallyShowing(t, "1,000 open pairs", func() bool {
		return lf.Metric("splicer_connections_active", "listener", "many") == pairs
	}, func() string {
		return fmt.Sprintf("%v active", lf.Metric("splicer_connections_active", "listener", "many"))
	})

	errs := make(chan error, pairs)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { errs <- exchange(c, fmt.Sprintf("pair %04d says hello", i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	lf.waitClosed(t, "many", "eof", pairs)
	testenv.EventuallyShowing(t, "the active gauge back to 0", func() bool {
		return lf.Metric("splicer_connections_active", "listener", "many") == 0
	}, func() string {
		return fmt.Sprintf("%v active", lf.Metric("splicer_connections_active", "listener", "many"))
	})
	if fl, err := lf.flows(); err != nil || len(fl) != 0 {
		t.Errorf("/flows after every pair closed: %d flows, %v", len(fl), err)
	}
}

// exchange sends msg through an echo upstream, half-closes, and expects msg
// back followed by EOF. It runs on many goroutines, so it returns errors.
func exchange(c *net.TCPConn, msg string) error {
	c.SetDeadline(time.Now().Add(waitFor))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	got := make([]byte, len(msg)+1)
	n, err := readUntilEOF(c, got)
	if err != nil {
		return fmt.Errorf("%q: %w", msg, err)
	}
	if string(got[:n]) != msg {
		return fmt.Errorf("sent %q, got back %q", msg, got[:n])
	}
	return nil
}

// readUntilEOF fills buf until EOF; more than len(buf) bytes is an error.
func readUntilEOF(c net.Conn, buf []byte) (int, error) {
	n := 0
	for {
		if n == len(buf) {
			return n, errors.New("more bytes than expected")
		}
		r, err := c.Read(buf[n:])
		n += r
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}

// TestLabShutdownCutsIdlePairAtGrace: an idle pair still open when the grace
// period ends is closed, and Shutdown returns saying pairs were cut.
func TestLabShutdownCutsIdlePairAtGrace(t *testing.T) {
	t.Parallel()
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9401))
	lf := startLabForwarder(t, l, tcpListener("idle", httplab.FwdAddr(l, 7401), httplab.ServerAddr(l, 9401)))
	client := httplab.Dial(t, l, lf.Addr("idle").String())
	echo(t, client, "still here")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- lf.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with an idle pair open returned %v, want the grace period's deadline", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Shutdown did not return after the grace period")
	}
	waitClosedByPeer(t, client, time.Second)
	lf.waitClosed(t, "idle", "shutdown", 1)
}

// TestLabShutdownLetsPairFinish: Shutdown stops accepting at once, but a
// pair that finishes within the grace period is not cut.
func TestLabShutdownLetsPairFinish(t *testing.T) {
	t.Parallel()
	l := lab.NewT(t, lab.DefaultConfig())
	upstream := serverConns(t, l, httplab.ServerAddr(l, 9501))
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9502))
	// Probing whether the forwarder still accepts may open a pair before
	// Shutdown closes the listeners; the probe listener's echo upstream
	// ends such a pair at once, and keeps it out of busy's counts.
	lf := startLabForwarder(t, l,
		tcpListener("busy", httplab.FwdAddr(l, 7501), httplab.ServerAddr(l, 9501)),
		tcpListener("probe", httplab.FwdAddr(l, 7502), httplab.ServerAddr(l, 9502)))
	probe := lf.Addr("probe").String()
	client := httplab.Dial(t, l, lf.Addr("busy").String())
	server := accept(t, upstream)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- lf.Shutdown(ctx) }()
	testenv.EventuallyShowing(t, "the listener to stop accepting", func() bool {
		c, err := l.Client.Dial(ctx, "tcp", probe)
		if err == nil {
			c.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	}, func() string { return "new connections still accepted during shutdown" })

	req, resp := enginetest.Random(64<<10, 3), enginetest.Random(1<<20, 4)
	writeAsync(t, client, req, true)
	if got := readAll(t, server); string(got) != string(req) {
		t.Fatalf("request during shutdown: %d bytes arrived, want %d", len(got), len(req))
	}
	writeAsync(t, server, resp, true)
	if got := readAll(t, client); string(got) != string(resp) {
		t.Fatalf("response during shutdown: %d bytes arrived, want %d", len(got), len(resp))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown after the last pair finished returned %v, want nil", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Shutdown did not return after the last pair finished")
	}
	if n := lf.closed("busy", "eof"); n != 1 {
		t.Errorf("%v pairs closed by eof, want the one that finished", n)
	}
}

// TestLabSpliceAfter: with splice_after the proxy copies in control mode,
// then hands the pair to the engine mid-stream; 32 MiB each way arrive
// intact across the change and /flows shows the engine change.
func TestLabSpliceAfter(t *testing.T) {
	t.Parallel()
	const size = 32 << 20
	l := lab.NewT(t, lab.DefaultConfig())
	// At 320 Mbit/s the transfer takes about 0.85 s, so the change at
	// 200 ms falls in its middle.
	if err := l.SetRate(l.ServerLink(), 320e6); err != nil {
		t.Fatal(err)
	}
	httplab.ServeProto(t, l, origin.Stream, httplab.ServerAddr(l, 9601))
	lc := tcpListener("later", httplab.FwdAddr(l, 7601), httplab.ServerAddr(l, 9601))
	lc.SpliceAfter = config.Duration(200 * time.Millisecond)
	lf := startLabForwarder(t, l, lc)
	auto, err := lf.Engines.Chain("auto")
	if err != nil {
		t.Fatal(err)
	}
	spliced := auto[0].Name()

	client := httplab.Dial(t, l, lf.Addr("later").String())
	lf.waitFlow(t, "later", "in control mode", func(f forwarder.Flow) bool {
		return f.State == "control" && f.Engine == "control"
	})
	flows := streamSampled(t, lf, "later", client, size)

	var engines []string
	for _, f := range flows {
		if len(engines) == 0 || engines[len(engines)-1] != f.Engine {
			engines = append(engines, f.Engine)
		}
		if f.Engine == spliced && f.State != "draining" && f.State != "spliced" && f.State != "closing" {
			t.Errorf("/flows shows engine %s in state %s", f.Engine, f.State)
		}
	}
	if want := []string{"control", spliced}; fmt.Sprint(engines) != fmt.Sprint(want) {
		t.Errorf("/flows showed engines %v during the transfer, want %v", engines, want)
	}
	lf.waitClosed(t, "later", "eof", 1)
}

// TestLabSpliceAfterClientNotReading: a client that takes nothing of what
// its server sends holds its pair for idle_timeout, also when splice_after
// ends the control phase while the proxy's write waits on that client.
// The phase lets such a write finish so that no byte is lost; it waited
// for ever (a pair held until shutdown) before it bounded the wait by the
// idle timeout.
func TestLabSpliceAfterClientNotReading(t *testing.T) {
	t.Parallel()
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Source, httplab.ServerAddr(l, 9611))
	lc := tcpListener("stalled", httplab.FwdAddr(l, 7611), httplab.ServerAddr(l, 9611))
	lc.SpliceAfter = config.Duration(300 * time.Millisecond) // the buffers fill well before
	lc.IdleTimeout = config.Duration(time.Second)
	lf := startLabForwarder(t, l, lc)
	httplab.Dial(t, l, lf.Addr("stalled").String()) // reads nothing until the test ends
	lf.waitClosed(t, "stalled", "idle", 1)
}

// Reload on loopback: listeners added, removed and replaced while pairs run on, a download through a replaced listener among them.

package forwarder_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

func loopListener(name, addr, upstream, engineName string) config.Listener {
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = name, addr, config.Servers(upstream), engineName
	return l
}

// reloadTo validates listeners as a configuration and reloads f with it.
func reloadTo(tb testing.TB, f *forwarder.Forwarder, listeners ...config.Listener) error {
	tb.Helper()
	cfg := config.Default()
	cfg.Listeners = listeners
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	_, err := f.Reload(&cfg)
	return err
}

// echoOnce sends msg through addr and checks it comes back whole.
func echoOnce(tb testing.TB, addr string, msg []byte) {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		tb.Fatalf("echo through %s: %d of %d bytes, err %v", addr, len(got), len(msg), err)
	}
}

// roundTrip writes msg on c and reads it back.
func roundTrip(tb testing.TB, c net.Conn, msg []byte) {
	tb.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		tb.Fatalf("write on the running pair: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		tb.Fatalf("running pair: read %q, err %v", got, err)
	}
}

func TestReloadAddsRemovesAndReplacesListeners(t *testing.T) {
	up := fwdtest.Echo(t)
	keep, gone, changed := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	f := fwdtest.Start(t,
		loopListener("keep", keep, up, copyengine.Name),
		loopListener("gone", gone, up, copyengine.Name),
		loopListener("changed", changed, up, copyengine.Name))

	running, err := net.Dial("tcp", keep)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	roundTrip(t, running, []byte("before reload"))

	// A pair on the listener that the reload replaces runs on too.
	onChanged, err := net.Dial("tcp", changed)
	if err != nil {
		t.Fatal(err)
	}
	defer onChanged.Close()
	roundTrip(t, onChanged, []byte("old settings"))

	// Connect to the replaced listener's address all through the reload:
	// its socket is handed over, so none may be refused.
	var refused, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.Dial("tcp", changed)
			if err != nil {
				refused.Add(1)
				continue
			}
			c.Write([]byte("x"))
			c.(*net.TCPConn).CloseWrite()
			if b, _ := io.ReadAll(c); string(b) == "x" {
				served.Add(1)
			}
			c.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond)

	added := testenv.FreeAddr(t)
	if err := reloadTo(t, f,
		loopListener("keep", keep, up, copyengine.Name),
		loopListener("changed", changed, up, pipe.Name),
		loopListener("added", added, up, "auto")); err != nil {
		t.Fatalf("reload: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()

	if n := refused.Load(); n != 0 {
		t.Errorf("%d connection attempts to the replaced listener were refused during the reload (%d served)", n, served.Load())
	}
	if served.Load() == 0 {
		t.Errorf("no connection to the replaced listener was served during the reload")
	}
	echoOnce(t, added, bytes.Repeat([]byte("added "), 50000))
	echoOnce(t, changed, bytes.Repeat([]byte("changed "), 50000))
	if _, err := net.Dial("tcp", gone); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial the removed listener: got %v, want connection refused", err)
	}
	if f.Addr("gone") != nil {
		t.Errorf("removed listener still has an address")
	}
	roundTrip(t, running, []byte("after reload"))
	roundTrip(t, onChanged, []byte("still the old listener's pair"))
}

func TestReloadThatCannotBindChangesNothing(t *testing.T) {
	up := fwdtest.Echo(t)
	a := testenv.FreeAddr(t)
	f := fwdtest.Start(t, loopListener("a", a, up, copyengine.Name))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = reloadTo(t, f, loopListener("b", taken.Addr().String(), up, copyengine.Name))
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("reload onto a taken address: err %v, want address in use", err)
	}
	echoOnce(t, a, []byte("still here"))
	if f.Addr("b") != nil {
		t.Errorf("refused reload left listener b behind")
	}
}

func TestReloadDrainsRemovedListenersPairs(t *testing.T) {
	up := fwdtest.Echo(t)
	a, b := testenv.FreeAddr(t), testenv.FreeAddr(t)
	f, cfg := startWithGrace(t, 300*time.Millisecond, loopListener("a", a, up, copyengine.Name), loopListener("b", b, up, copyengine.Name))
	c, err := net.Dial("tcp", b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("hi"))
	next := cfg
	next.Listeners = cfg.Listeners[:1]
	if _, err := f.Reload(&next); err != nil {
		t.Fatal(err)
	}
	// The removed listener's pair keeps running for the grace period, then
	// is closed.
	roundTrip(t, c, []byte("within grace"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("pair of a removed listener not closed after the grace period: %v", err)
	}
}

// TestReloadLetsChangedListenersDownloadFinish: a download through a
// listener whose engine a reload changes (copy to pipe) runs on, on the
// old engine, well past shutdown_timeout, and every byte arrives as the
// origin sent it; the pair ends by EOF, not cut as at a shutdown.
func TestReloadLetsChangedListenersDownloadFinish(t *testing.T) {
	const size = 32 << 20
	const grace = 300 * time.Millisecond
	up, addr := fwdtest.Stream(t), testenv.FreeAddr(t)
	f, cfg := startWithGrace(t, grace, loopListener("dl", addr, up, copyengine.Name))
	client := dialPaced(t, addr, 16<<20) // about 2s for the download

	type result struct {
		rep origin.StreamReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := origin.StreamCheck(context.Background(), client, 0, size)
		done <- result{rep, err}
	}()
	testenv.EventuallyShowing(t, "the download under way", func() bool { return client.read.Load() >= 2<<20 },
		func() string { return fmt.Sprintf("%d bytes read", client.read.Load()) })

	next := cfg
	next.Listeners = []config.Listener{loopListener("dl", addr, up, pipe.Name)}
	if _, err := f.Reload(&next); err != nil {
		t.Fatalf("reload: %v", err)
	}
	reloaded := time.Now()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the download did not end (%d bytes read)", client.read.Load())
	}
	if r.err != nil || !r.rep.OK() || r.rep.Downloaded != size {
		t.Fatalf("download across the reload: %d of %d bytes, intact %v, err %v", r.rep.Downloaded, size, r.rep.DownloadOK, r.err)
	}
	if after := time.Since(reloaded); after < 2*grace {
		t.Fatalf("the download ended %v after the reload, within shutdown_timeout (%v): pace it slower", after, grace)
	}
	testenv.EventuallyShowing(t, "the pair counted closed", func() bool {
		return closedBy(f, "dl", "eof")+closedBy(f, "dl", "shutdown") >= 1
	}, func() string { return "no close counted" })
	if eof, cut := closedBy(f, "dl", "eof"), closedBy(f, "dl", "shutdown"); eof != 1 || cut != 0 {
		t.Errorf("pairs of dl closed: %v by eof, %v by shutdown; want the download's by eof", eof, cut)
	}
	// The replacement serves new connections meanwhile.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rep, err := origin.StreamCheck(context.Background(), c, 1<<20, 1<<20); err != nil || !rep.OK() {
		t.Errorf("stream through the replacement listener: %+v, %v", rep, err)
	}
}

// TestShutdownClosesChangedListenersPairAtTimeout: a changed listener's pair
// outlives shutdown_timeout after the reload, and a shutdown still closes it
// once its own shutdown_timeout is over: the bound on such a pair is real.
func TestShutdownClosesChangedListenersPairAtTimeout(t *testing.T) {
	const grace = 300 * time.Millisecond
	up, addr := fwdtest.Echo(t), testenv.FreeAddr(t)
	f, cfg := startWithGrace(t, grace, loopListener("held", addr, up, copyengine.Name))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("before the reload"))
	next := cfg
	next.Listeners = []config.Listener{loopListener("held", addr, up, pipe.Name)}
	if _, err := f.Reload(&next); err != nil {
		t.Fatalf("reload: %v", err)
	}
	time.Sleep(3 * grace)
	roundTrip(t, c, []byte("past shutdown_timeout after the reload"))

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f.ShutdownTimeout() }()
	c.SetReadDeadline(time.Now().Add(waitFor))
	_, err = c.Read(make([]byte, 1))
	after := time.Since(start)
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("pair of the replaced listener not closed by the shutdown: read %v after %v", err, after)
	}
	if after < grace*9/10 {
		t.Errorf("pair closed %v into the shutdown, before shutdown_timeout (%v)", after, grace)
	}
	if err := <-done; err == nil {
		t.Errorf("ShutdownTimeout with the pair open returned nil, want pairs closed at the timeout")
	}
	if n := closedBy(f, "held", "shutdown"); n != 1 {
		t.Errorf("%v pairs of held closed by shutdown, want 1", n)
	}
}

// startWithGrace runs a forwarder on loopback with listeners and a
// shutdown_timeout of grace, shut down at cleanup. It returns the
// configuration too, for a reload to start from.
func startWithGrace(tb testing.TB, grace time.Duration, listeners ...config.Listener) (*forwarder.Forwarder, config.Config) {
	tb.Helper()
	cfg := config.Default()
	cfg.ShutdownTimeout = config.Duration(grace)
	cfg.Listeners = listeners
	f := fwdtest.StartConfig(tb, &cfg, forwarder.Options{})
	return f, cfg
}

// closedBy is splicer_connections_closed_total of listener for reason.
func closedBy(f *forwarder.Forwarder, listener, reason string) float64 {
	return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", listener, "reason", reason)
}

// pacedConn is a client that reads at most rate bytes a second, as over a
// slow link, so that a download through it outlasts a short
// shutdown_timeout. read counts the bytes read so far.
type pacedConn struct {
	*net.TCPConn
	rate int64
	read atomic.Int64
}

// dialPaced connects to addr with a small receive buffer, so that the
// forwarder, not the client's socket, holds the rest of the download.
func dialPaced(tb testing.TB, addr string, rate int64) *pacedConn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	tc := c.(*net.TCPConn)
	tc.SetReadBuffer(128 << 10)
	return &pacedConn{TCPConn: tc, rate: rate}
}

func (c *pacedConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b[:min(len(b), 64<<10)])
	c.read.Add(int64(n))
	time.Sleep(time.Duration(int64(n) * int64(time.Second) / c.rate))
	return n, err
}

// Reload on loopback: listeners added, removed and replaced while a pair on another listener runs on.

package forwarder_test

import (
	"bytes"
	"context"
	"errors"
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
	keep, gone, changed := fwdtest.FreeAddr(t), fwdtest.FreeAddr(t), fwdtest.FreeAddr(t)
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

	added := fwdtest.FreeAddr(t)
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
	a := fwdtest.FreeAddr(t)
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
	a, b := fwdtest.FreeAddr(t), fwdtest.FreeAddr(t)
	cfg := config.Default()
	cfg.ShutdownTimeout = config.Duration(300 * time.Millisecond)
	cfg.Listeners = []config.Listener{loopListener("a", a, up, copyengine.Name), loopListener("b", b, up, copyengine.Name)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := forwarder.New(&cfg, forwarder.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Shutdown(context.Background()) })
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

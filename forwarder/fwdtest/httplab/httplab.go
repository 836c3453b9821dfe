// Package httplab runs the HTTP proxies' lab tests: an in-process forwarder in a lab's forwarder namespace, HTTP servers (Go's, or nginx) in the server namespace, curl in the client namespace.
//
// It is test support for the packages whose tests speak HTTP through the
// lab (the proxies, the splicer command), kept out of their _test files so
// that they share the same helpers.
package httplab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
	"github.com/splicer/splicer/proxy/httpcore/httprand"
)

// WaitFor bounds every wait for something asynchronous; generous, since it
// only matters when a test is about to fail.
const WaitFor = 10 * time.Second

// Forwarder is an in-process forwarder whose listeners and upstream
// connections live in a lab's forwarder namespace.
type Forwarder struct {
	*fwdtest.LabForwarder
}

// New builds a lab for tb (root only: skipped outside CI, failed in it).
func New(tb testing.TB) *lab.Lab {
	tb.Helper()
	testenv.RequireRoot(tb)
	return lab.NewT(tb, lab.DefaultConfig())
}

// FwdAddr is the forwarder's client-side address with port.
func FwdAddr(l *lab.Lab, port uint16) string {
	return netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), port).String()
}

// ServerAddr is the server's address with port.
func ServerAddr(l *lab.Lab, port uint16) string {
	return netip.AddrPortFrom(l.Cfg.Server.Addr(), port).String()
}

// ClientIP is the client host's address.
func ClientIP(l *lab.Lab) string { return l.Cfg.Client.Addr().String() }

// Listener is a listener of the given kind with every other key at its default.
func Listener(name, listen, kind string) config.Listener {
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Proxy = name, listen, kind
	return lc
}

// Start runs listeners in l's forwarder namespace with the engines built
// there; Cleanup shuts it down and prints its log if the test failed.
func Start(tb testing.TB, l *lab.Lab, listeners ...config.Listener) *Forwarder {
	tb.Helper()
	return &Forwarder{fwdtest.StartInLab(tb, l, listeners...)}
}

// StartWith is Start with the engines configured as given.
func StartWith(tb testing.TB, l *lab.Lab, engines config.Engines, listeners ...config.Listener) *Forwarder {
	tb.Helper()
	return &Forwarder{fwdtest.StartInLabWith(tb, l, engines, listeners...)}
}

// Splices is how many splices engine ended with outcome (limit, eof, ...).
func (f *Forwarder) Splices(engine, outcome string) float64 {
	return f.Metric("splicer_splice_transitions_total", "engine", engine, "outcome", outcome)
}

// Spliced is how many splices any engine ended with outcome: an engine that
// cannot honour a byte limit declines and a shallower one splices instead,
// so which engine did depends on the host.
func (f *Forwarder) Spliced(outcome string) float64 {
	var n float64
	for _, e := range f.Engines.Engines {
		n += f.Splices(e.Name(), outcome)
	}
	return n
}

// SplicesEnded is how many splices any engine ran, however they ended.
func (f *Forwarder) SplicesEnded() float64 {
	var n float64
	for _, outcome := range []string{"eof", "limit", "data", "reset", "idle", "cancel", "error", "timer"} {
		n += f.Spliced(outcome)
	}
	return n
}

// Curl runs curl in the client namespace with args (silent, failing on
// HTTP errors unless args say otherwise) and returns its standard output.
func Curl(tb testing.TB, l *lab.Lab, args ...string) ([]byte, error) {
	tb.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.SkipOrFail(tb, "curl is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*WaitFor)
	defer cancel()
	cmd := l.Client.Command(ctx, "curl", append([]string{"-sS", "--max-time", "15"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("curl %v: %v: %s", args, err, errb.String())
	}
	return out.Bytes(), nil
}

// ServeOrigin serves the origin's http protocol on addr in the server
// namespace until the test ends.
func ServeOrigin(tb testing.TB, l *lab.Lab, addr string, opts ...origin.Option) *origin.Server {
	tb.Helper()
	return ServeProto(tb, l, origin.HTTP, addr, opts...)
}

// ServeProto serves the origin's protocol proto on addr in the server
// namespace until the test ends.
func ServeProto(tb testing.TB, l *lab.Lab, proto origin.Proto, addr string, opts ...origin.Option) *origin.Server {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("origin %s listen %s: %v", proto, addr, err)
	}
	return origintest.Serve(tb, ln, proto, opts...)
}

// ServeRandom serves httprand's back-end on addr in the server namespace
// until the test ends.
func ServeRandom(tb testing.TB, l *lab.Lab, addr string) {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				httprand.Serve(c)
			})
		}
	})
}

// ServeHTTP serves h on addr in the server namespace until the test ends.
func ServeHTTP(tb testing.TB, l *lab.Lab, addr string, h http.Handler) {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	ServeHTTPOn(tb, ln, &http.Server{Handler: h, ReadHeaderTimeout: WaitFor})
}

// ServeHTTPOn runs hs on ln until the test ends.
func ServeHTTPOn(tb testing.TB, ln net.Listener, hs *http.Server) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs.Serve(ln)
	}()
	tb.Cleanup(func() {
		hs.Close()
		<-done
	})
}

// Dial connects from the client namespace to addr.
func Dial(tb testing.TB, l *lab.Lab, addr string) *net.TCPConn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitFor)
	defer cancel()
	c, err := l.Client.Dial(ctx, "tcp", addr)
	if err != nil {
		tb.Fatalf("client dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// LogBuffer collects a forwarder's log lines.
type LogBuffer = fwdtest.LogBuffer

// ExampleListener is the listener named name of the example configuration
// at path, so that a lab test serves traffic exactly as the example says.
func ExampleListener(tb testing.TB, path, name string) config.Listener {
	tb.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatalf("example: %v", err)
	}
	for _, lc := range cfg.Listeners {
		if lc.Name == name {
			return lc
		}
	}
	tb.Fatalf("example %s has no listener %q", path, name)
	return config.Listener{}
}

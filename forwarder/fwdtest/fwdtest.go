// Package fwdtest starts in-process forwarders for tests: listeners on loopback, shut down at cleanup.
package fwdtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
)

// Start validates listeners, runs a forwarder with them on this host's
// network (engines built as the process's privileges allow) and shuts it down
// at cleanup, giving open pairs five seconds.
func Start(tb testing.TB, listeners ...config.Listener) *forwarder.Forwarder {
	tb.Helper()
	return StartWith(tb, forwarder.Options{}, listeners...)
}

// StartWith is Start with opts: a Dial that stands in for DNS, a Log to
// read.
func StartWith(tb testing.TB, opts forwarder.Options, listeners ...config.Listener) *forwarder.Forwarder {
	tb.Helper()
	cfg := config.Default()
	cfg.Listeners = listeners
	return StartConfig(tb, &cfg, opts)
}

// StartConfig is StartWith for a whole configuration (a shutdown_timeout,
// settings beside the listeners).
func StartConfig(tb testing.TB, cfg *config.Config, opts forwarder.Options) *forwarder.Forwarder {
	tb.Helper()
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	f, err := forwarder.New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Shutdown(ctx)
	})
	return f
}

// TCP is a tcp listener named name on a loopback port of its own, in
// front of upstream, as config.DefaultListener sets it otherwise.
func TCP(name, upstream string) config.Listener {
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream = name, "127.0.0.1:0", config.Servers(upstream)
	return l
}

// HTTPOrigin serves the origin's HTTP protocol (GET /obj/SIZE, /health) on
// a loopback port until the test ends, and returns its address.
func HTTPOrigin(tb testing.TB) string {
	tb.Helper()
	return serveOrigin(tb, origin.HTTP)
}

// Echo serves the origin's echo protocol (every byte back, the FIN after
// the last one) on a loopback port until the test ends, and returns its
// address.
func Echo(tb testing.TB) string {
	tb.Helper()
	return serveOrigin(tb, origin.Echo)
}

// Stream serves the origin's stream protocol (origin.StreamCheck's
// verified upload and download) on a loopback port until the test ends,
// and returns its address.
func Stream(tb testing.TB) string {
	tb.Helper()
	return serveOrigin(tb, origin.Stream)
}

// ServeHTTPOriginAt is HTTPOrigin on addr (a FreeAddr that a test brings
// up late).
func ServeHTTPOriginAt(tb testing.TB, addr string) {
	tb.Helper()
	serveOriginAt(tb, origin.HTTP, addr)
}

func serveOrigin(tb testing.TB, proto origin.Proto) string {
	tb.Helper()
	return serveOriginAt(tb, proto, "127.0.0.1:0")
}

// serveOriginAt serves proto on addr until the test ends and returns the
// address it listens on.
func serveOriginAt(tb testing.TB, proto origin.Proto, addr string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	origintest.Serve(tb, ln, proto)
	return ln.Addr().String()
}

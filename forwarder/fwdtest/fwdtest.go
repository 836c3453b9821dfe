// Package fwdtest starts in-process forwarders for tests: listeners on loopback, shut down at cleanup.
package fwdtest

import (
	"context"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
)

// Start validates listeners, runs a forwarder with them on this host's
// network (engines built as the process's privileges allow) and shuts it down
// at cleanup, giving open pairs five seconds.
func Start(tb testing.TB, listeners ...config.Listener) *forwarder.Forwarder {
	tb.Helper()
	cfg := config.Default()
	cfg.Listeners = listeners
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	f, err := forwarder.New(&cfg, forwarder.Options{})
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

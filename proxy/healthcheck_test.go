// Tests of the active health checks' fall and rise thresholds.

package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// TestFallAndRise: with fall 3 and rise 2, a healthy server stays healthy
// through two failed checks, is marked down at the third in a row, stays
// down through a pass broken by a failure, and is up again after two
// passes in a row.
func TestFallAndRise(t *testing.T) {
	calls, outcomes := make(chan struct{}), make(chan bool)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case calls <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case ok := <-outcomes:
			if ok {
				c, peer := net.Pipe()
				peer.Close()
				return c, nil
			}
			return nil, errors.New("refused")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var healthy atomic.Bool
	healthy.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	hc := config.HealthCheck{Interval: config.Duration(time.Millisecond), Timeout: config.Duration(time.Second), Fall: 3, Rise: 2}
	go func() {
		defer close(done)
		CheckHealth(ctx, hc, "s:1", &healthy, dial, slog.New(slog.DiscardHandler))
	}()
	<-calls
	for i, step := range []struct{ passes, healthy bool }{
		{false, true}, {false, true}, {false, false}, // fall 3
		{true, false}, {false, false}, // a pass, not two in a row
		{true, false}, {true, true}, // rise 2
		{false, true}, {true, true}, {false, true}, // failures not in a row
	} {
		outcomes <- step.passes
		<-calls // the next check began: this one's outcome is stored
		if got := healthy.Load(); got != step.healthy {
			t.Fatalf("check %d (passes %v): healthy %v, want %v", i+1, step.passes, got, step.healthy)
		}
	}
}

// Adopted pairs in the forwarder: /flows lists them under the listener they arrived on, shutdown waits for them (not after LeaveSplicedPairs), and LeaveSplicedPairs reaches the engines.

package forwarder_test

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/all"
	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
)

// adopter is an engine with adopted pairs, which end when told to.
type adopter struct {
	engine.Engine
	pairs atomic.Pointer[[]engine.AdoptedPair]
	left  atomic.Bool
}

func (a *adopter) Name() string                  { return ip.Name }
func (a *adopter) Adopted() []engine.AdoptedPair { return *a.pairs.Load() }
func (a *adopter) LeavePairs()                   { a.left.Store(true) }
func (a *adopter) set(p ...engine.AdoptedPair)   { a.pairs.Store(&p) }

func newAdopterForwarder(t *testing.T) (*forwarder.Forwarder, *adopter) {
	t.Helper()
	a := &adopter{Engine: copyengine.New(0)}
	a.set(engine.AdoptedPair{
		Client: netip.MustParseAddrPort("10.99.1.2:40000"), Local: netip.MustParseAddrPort("10.99.1.1:7000"),
		Server: netip.MustParseAddrPort("10.99.2.2:80"), State: engine.StateSpliced, Bytes: [2]int64{5, 7},
		Adopted: time.Now().Add(-time.Second),
	})
	cfg := config.Default()
	for _, l := range []struct{ name, listen string }{{"other", "127.0.0.1:7000"}, {"any", ":7000"}} {
		lc := config.DefaultListener()
		lc.Name, lc.Listen, lc.Upstream, lc.Engine = l.name, l.listen, config.Servers("127.0.0.1:1"), ip.Name
		cfg.Listeners = append(cfg.Listeners, lc)
	}
	f, err := forwarder.New(&cfg, forwarder.Options{Engines: &all.Set{Engines: []engine.Engine{a}}})
	if err != nil {
		t.Fatal(err)
	}
	return f, a
}

func TestAdoptedPairsInFlows(t *testing.T) {
	f, a := newAdopterForwarder(t)
	defer func() {
		a.set() // the pair ends, or Shutdown would wait for it
		f.Shutdown(context.Background())
	}()
	flows := f.Flows().Snapshot()
	if len(flows) != 1 {
		t.Fatalf("/flows %+v, want the adopted pair", flows)
	}
	got := flows[0]
	if !got.Adopted || got.Listener != "any" || got.Engine != ip.Name || got.State != "spliced" || got.Client != "10.99.1.2:40000" ||
		got.Upstream != "10.99.2.2:80" || got.BytesUp != 5 || got.BytesDown != 7 || got.AgeS < 1 {
		t.Errorf("adopted flow %+v", got)
	}
}

func TestShutdownWaitsForAdoptedPairs(t *testing.T) {
	f, a := newAdopterForwarder(t)
	go func() { time.Sleep(300 * time.Millisecond); a.set() }()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Errorf("Shutdown returned %v after %v, want nil once the adopted pair ended", err, time.Since(start))
	}

	// After LeaveSplicedPairs they are left to the next process.
	f, a = newAdopterForwarder(t)
	f.LeaveSplicedPairs()
	if !a.left.Load() {
		t.Errorf("LeaveSplicedPairs did not reach the engine")
	}
	start = time.Now()
	if err := f.Shutdown(ctx); err != nil || time.Since(start) > time.Second {
		t.Errorf("Shutdown after LeaveSplicedPairs: %v after %v, want at once", err, time.Since(start))
	}
}

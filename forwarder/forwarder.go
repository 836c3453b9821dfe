// Package forwarder accepts client connections on each configured listener, runs the listener's proxy in control mode and hands pairs to engines.
package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/internal/accesslog"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/metrics"
)

// DialFunc opens an upstream connection; ListenFunc opens a listener. Tests
// and the lab replace them to work inside a network namespace. A DialFunc
// should apply the socket options its context carries before connect
// (net.Dialer{ControlContext: sockopt.Control}), as the default and
// lab.NS.Dial do: without them engine ip falls back on every pair whose
// client accepts smaller segments than the server would send.
type (
	DialFunc   func(ctx context.Context, network, addr string) (net.Conn, error)
	ListenFunc func(network, addr string) (net.Listener, error)
)

// Options are the forwarder's dependencies; zero values pick the defaults.
type Options struct {
	Log     *slog.Logger
	Metrics *metrics.Metrics
	Dial    DialFunc   // default: net.Dialer with sockopt.Control, no keepalive of Go's
	Listen  ListenFunc // default: net.Listen with no keepalive of Go's
	// Engines overrides the engines built from the configuration.
	Engines *all.Set
	// AccessLog, if set, gets one line per closed pair and one per
	// answered HTTP request (see accesslog.go).
	AccessLog *accesslog.Logger
	// Inherit returns a listening socket handed over by the process this
	// one replaces (a hitless upgrade), or nil to bind a new one.
	Inherit InheritFunc
}

// InheritFunc returns the socket inherited for a listener, or nil.
type InheritFunc func(name, addr string) (net.Listener, error)

// Forwarder runs every listener of a configuration.
type Forwarder struct {
	cfg *config.Config
	log *slog.Logger
	// access is the text access log's slog logger, accessLog the json
	// or combined one's; nil when not in use.
	access    *slog.Logger
	accessLog *accesslog.Logger
	metrics   *metrics.Metrics
	series    *series
	engines   *all.Set
	ownsSet   bool
	dial      DialFunc
	listen    ListenFunc
	inherit   InheritFunc
	// quietDial, quietListen: dial and listen are the forwarder's own
	// (dialQuiet, listenQuiet), which set no keepalive of Go's.
	quietDial, quietListen bool
	flows                  *Flows
	// gc lowers the collector's headroom while many pairs are detached.
	gc *detachedGC

	// mu guards listeners, retiring, cfg and stopped against a reload.
	mu        sync.Mutex
	listeners []*listener
	// retiring are listeners a reload removed or replaced whose pairs are
	// still finishing.
	retiring map[*listener]struct{}
	stopped  bool
	// leave: LeaveSplicedPairs was called; shutdown does not wait for
	// adopted pairs, which stay for the next process.
	leave bool
	// hard is cancelled when the graceful period is over: every pair's
	// engine returns and the pair is closed.
	hard   context.Context
	cancel context.CancelFunc
	pairs  sync.WaitGroup
	once   sync.Once
}

// New builds a forwarder for cfg; Start binds its listeners.
func New(cfg *config.Config, opts Options) (*Forwarder, error) {
	f := &Forwarder{cfg: cfg, log: opts.Log, metrics: opts.Metrics, engines: opts.Engines,
		dial: opts.Dial, listen: opts.Listen, inherit: opts.Inherit, flows: newFlows(), access: opts.AccessLog.Slog(),
		retiring: map[*listener]struct{}{}, gc: newDetachedGC(cfg.Memory)}
	if f.access == nil {
		f.accessLog = opts.AccessLog
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.metrics == nil {
		f.metrics = metrics.New()
	}
	if f.dial == nil {
		f.dial, f.quietDial = dialQuiet, true
	}
	if f.listen == nil {
		f.listen, f.quietListen = listenQuiet, true
	}
	if f.engines == nil {
		f.engines = all.Build(cfg.Engines, f.log)
		f.ownsSet = true
		for _, u := range f.engines.Unavailable {
			f.log.Warn("engine unavailable", "engine", u.Name, "reason", u.Reason)
		}
	}
	f.flows.adopted = f.adoptedFlows
	f.series = newSeries(f.metrics)
	f.metrics.RegisterEngines(metricsEngines(f.engines.Engines))
	f.metrics.Register(newByteCollector(f.flows), healthCollector{f}, poolCollector{f}, limitCollector{f})
	f.hard, f.cancel = context.WithCancel(context.Background())
	for _, lc := range cfg.Listeners {
		l, err := newListener(f, lc)
		if err != nil {
			f.closeEngines()
			return nil, fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		f.listeners = append(f.listeners, l)
	}
	return f, nil
}

// Draining reports whether the forwarder has stopped accepting for good
// (a shutdown or the old side of an upgrade): /ready answers 503.
func (f *Forwarder) Draining() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}

// Metrics returns the forwarder's metrics.
func (f *Forwarder) Metrics() *metrics.Metrics { return f.metrics }

// Flows returns the forwarder's pair registry.
func (f *Forwarder) Flows() *Flows { return f.flows }

// Start binds every listener and starts accepting. On error nothing is left
// listening.
func (f *Forwarder) Start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := bindAll(f.listeners); err != nil {
		return err
	}
	for _, l := range f.listeners {
		l.start()
	}
	return nil
}

// bindAll binds every listener of ls; on error it closes those it bound.
func bindAll(ls []*listener) error {
	for i, l := range ls {
		if err := l.bind(); err != nil {
			for _, b := range ls[:i] {
				b.close()
			}
			return fmt.Errorf("listener %s: %w", l.cfg.Name, err)
		}
	}
	return nil
}

// Addr returns the bound address of the named listener (useful with port 0).
func (f *Forwarder) Addr(name string) net.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.listeners {
		if l.cfg.Name == name && l.ln != nil {
			return l.ln.Addr()
		}
	}
	return nil
}

// Shutdown stops accepting, lets open pairs finish until ctx is done, then
// cancels the rest and waits for them to close. It returns ctx's error when
// pairs had to be cut.
func (f *Forwarder) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.stopped = true
	all := f.allListeners()
	leave := f.leave
	f.mu.Unlock()
	f.metrics.Draining.Set(1)
	for _, l := range all {
		l.life.stop()
		l.close()
	}
	for _, l := range all {
		// A connection accepted just before the close is counted in
		// f.pairs (Add) before its loop returns: Wait must come after,
		// or it could miss that pair (and the race detector says so).
		l.life.waitServed()
	}
	done := make(chan struct{})
	go func() {
		f.pairs.Wait()
		if !leave {
			f.waitAdopted(ctx) // pairs an earlier process left get the same grace
		}
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		f.log.Warn("shutdown timeout: closing open pairs", "open", f.flows.Len())
		f.cancel()
		<-done
	}
	f.cancel()
	for _, l := range all {
		l.closeProxy()
	}
	f.closeEngines()
	return err
}

// allListeners is the current listeners and those still retiring; f.mu held.
func (f *Forwarder) allListeners() []*listener {
	all := append([]*listener(nil), f.listeners...)
	for l := range f.retiring {
		all = append(all, l)
	}
	return all
}

// ShutdownTimeout is Shutdown with the configured grace period.
func (f *Forwarder) ShutdownTimeout() error {
	ctx, cancel := context.WithTimeout(context.Background(), f.grace())
	defer cancel()
	err := f.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pairs still open after %s were closed", f.grace())
	}
	return err
}

// grace is the configured shutdown_timeout of the running configuration.
func (f *Forwarder) grace() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg.ShutdownTimeout.Std()
}

func (f *Forwarder) closeEngines() {
	f.once.Do(func() {
		if f.ownsSet {
			f.engines.Close()
		}
	})
}

// uptime is how long ago t was, in seconds.
func uptime(t time.Time) float64 { return time.Since(t).Seconds() }

// metricsEngines lists engines as the metrics package takes them.
func metricsEngines(engines []engine.Engine) []metrics.Engine {
	out := make([]metrics.Engine, len(engines))
	for i, e := range engines {
		out[i] = e
	}
	return out
}

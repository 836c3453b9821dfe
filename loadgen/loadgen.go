// Package loadgen drives bounded TCP and HTTP load at an origin, straight or through splicer, and returns the numbers.
//
// Every generator is bounded in connections and in time (or request count),
// honours its context, closes what it opened before returning, and dials
// through a DialFunc so the caller decides the path (a network namespace, a
// proxy, plain loopback):
//
//	Bulk     n connections streaming to a sink, from a source, or both ways through an echo
//	RR       one connection ping-ponging fixed-size messages with an echo or rr server
//	HTTPGet  n GETs at a given concurrency, keep-alive on or off
//	Trace    a bulk transfer sampled at an interval, for throughput-over-time plots
//
// The servers are those of package origin.
package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"
)

// DialFunc opens a connection, like net.Dialer.DialContext; nil means a
// plain net.Dialer.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (d DialFunc) orDefault() DialFunc {
	if d != nil {
		return d
	}
	return new(net.Dialer).DialContext
}

// Dir is which way bulk data flows, seen from the client.
type Dir uint8

const (
	// Up sends to the server; point it at an origin sink.
	Up Dir = iota
	// Down receives from the server; point it at an origin source.
	Down
	// Both sends and receives at once on each connection; point it at an
	// origin echo. Bytes count both directions.
	Both
)

func (d Dir) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	case Both:
		return "both"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}

// DefaultWarmup is how long Bulk and RR run before they start measuring,
// so that slow start and first-packet costs stay out of the numbers.
const DefaultWarmup = 200 * time.Millisecond

// Option tunes a generator; each says which generators it applies to.
type Option func(*config)

type config struct {
	warmup      time.Duration
	noKeepAlive bool
	verify      bool
	dir         Dir
	conns       int
	proxy       *url.URL
}

func newConfig(opts []Option) config {
	c := config{warmup: DefaultWarmup, dir: Down, conns: 1}
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// WithWarmup sets the unmeasured run-in of Bulk and RR (default
// DefaultWarmup; 0 measures from the first byte).
func WithWarmup(d time.Duration) Option { return func(c *config) { c.warmup = max(d, 0) } }

// WithKeepAlive turns HTTP keep-alive on (the default) or off for HTTPGet;
// off, every request dials a new connection.
func WithKeepAlive(on bool) Option { return func(c *config) { c.noKeepAlive = !on } }

// WithVerifyBody makes HTTPGet check each body's sha256 against
// origin.ObjectSHA256; the URL must name an origin object (/obj/<size>).
func WithVerifyBody() Option { return func(c *config) { c.verify = true } }

// WithProxy makes HTTPGet send its requests through the forward proxy at
// u (absolute-URI requests over connections dialled to the proxy).
func WithProxy(u *url.URL) Option { return func(c *config) { c.proxy = u } }

// WithDir sets Trace's direction (default Down).
func WithDir(d Dir) Option { return func(c *config) { c.dir = d } }

// WithConns sets Trace's number of connections (default 1).
func WithConns(n int) Option { return func(c *config) { c.conns = n } }

// gbps converts bytes moved in d to gigabits per second.
func gbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) * 8 / d.Seconds() / 1e9
}

// percentile returns the q-quantile (0..1) of sorted by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// latencies summarises samples, which it sorts in place.
func latencies(samples []time.Duration) (p50, p99, maxLat time.Duration) {
	slices.Sort(samples)
	if len(samples) == 0 {
		return 0, 0, 0
	}
	return percentile(samples, 0.50), percentile(samples, 0.99), samples[len(samples)-1]
}

// sleepCtx waits d, returning early with ctx's error or when stop closes.
func sleepCtx(ctx context.Context, d time.Duration, stop <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pairLogger: a pair's logger, its attributes formatted only when it writes a line.

package forwarder

import (
	"context"
	"log/slog"
	"net"
	"sync"

	"github.com/splicer/splicer/engine"
)

// pairLogger is log with the pair's attributes: its ID, the client's
// address and, unless nil, up, its upstream's. slog's handlers format a
// logger's attributes when it is made (With), which for a pair that
// writes no line, at a level that keeps per-pair lines off, was the
// logger's whole cost: lazyAttrs formats them at the first line instead.
func pairLogger(log *slog.Logger, p *engine.Pair, up any) *slog.Logger {
	attrs := []slog.Attr{slog.Uint64("pair", p.ID), slog.Any("client", addrValue{p.ClientAddr()})}
	if up != nil {
		attrs = append(attrs, slog.Any("upstream", up))
	}
	return slog.New(&lazyAttrs{inner: log.Handler(), attrs: attrs})
}

// addrValue logs an address as its String, made only when written.
type addrValue struct{ net.Addr }

// LogValue implements slog.LogValuer.
func (a addrValue) LogValue() slog.Value { return slog.StringValue(a.String()) }

// lazyAttrs is inner with attrs added (inner.WithAttrs) on the first
// line that is written, and then kept.
type lazyAttrs struct {
	inner slog.Handler
	attrs []slog.Attr
	once  sync.Once
	with  slog.Handler
}

func (h *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

// WithAttrs stays lazy: a proxy's logger With more attributes
// costs no formatting either.
func (h *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lazyAttrs{inner: h.inner, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

func (h *lazyAttrs) WithGroup(name string) slog.Handler {
	return h.handler().WithGroup(name)
}

// handler is inner with the attributes, made once.
func (h *lazyAttrs) handler() slog.Handler {
	h.once.Do(func() { h.with = h.inner.WithAttrs(h.attrs) })
	return h.with
}

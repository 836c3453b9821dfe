// The access log's lines: one per closed pair and one per answered HTTP request, in the format access_log.format names.

package forwarder

import (
	"context"
	"log/slog"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/accesslog"
	"github.com/splicer/splicer/proxy"
)

// logPair writes a closed pair's access log line: the text format's
// (accessLine), or a json or combined one.
func (l *listener) logPair(p *engine.Pair, reason string, err error) {
	if a := l.f.access; a != nil {
		a.LogAttrs(context.Background(), slog.LevelInfo, "pair", accessLine(p, reason, err)...)
		return
	}
	a := l.f.accessLog
	if a == nil {
		return
	}
	name, note := p.Engine()
	e := accesslog.Entry{Type: "pair", Time: time.Now(), Listener: p.Listener, Kind: l.cfg.Proxy,
		Client: p.ClientAddr().String(), Upstream: upstreamOf(p), Engine: name,
		BytesUp: p.Bytes(engine.Up), BytesDown: p.Bytes(engine.Down), Duration: time.Since(p.Created),
		Reason: reason, Note: note}
	if err != nil && reason != "eof" {
		e.Err = err.Error()
	}
	a.Log(&e)
}

// LogRequest implements proxy.RequestLogger: an answered request's line
// in the json or combined access log. (The text format's is written by
// RecordRequest.)
func (s *session) LogRequest(r proxy.Request) {
	a := s.l.f.accessLog
	if a == nil {
		return
	}
	a.Log(&accesslog.Entry{Type: "request", Time: time.Now(), Listener: s.l.cfg.Name, Kind: s.l.cfg.Proxy,
		Client: s.p.ClientAddr().String(), Method: r.Method, Host: r.Host, Target: r.Target,
		Protocol: r.Proto, Status: r.Status, BytesUp: r.BytesUp, BytesDown: r.Bytes,
		Duration: r.Duration, UpstreamDuration: r.Upstream, UserAgent: r.UserAgent, Referer: r.Referer,
		RequestID: r.RequestID, Upstream: upstreamOf(s.p), Engine: engineOf(s.p)})
}

// accessLine is a closed pair as the text access log shows it.
func accessLine(p *engine.Pair, reason string, err error) []slog.Attr {
	name, note := p.Engine()
	upstream := upstreamOf(p)
	attrs := []slog.Attr{
		slog.String("listener", p.Listener), slog.String("client", p.ClientAddr().String()),
		slog.String("upstream", upstream), slog.String("engine", name),
		slog.Int64("bytes_up", p.Bytes(engine.Up)), slog.Int64("bytes_down", p.Bytes(engine.Down)),
		slog.Float64("duration_s", uptime(p.Created)), slog.String("reason", reason),
	}
	if note != "" {
		attrs = append(attrs, slog.String("note", note))
	}
	if err != nil && reason != "eof" {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	return attrs
}

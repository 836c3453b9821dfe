// Package copy is the shallowest engine: read() into a user-space buffer, write() out, one buffer per direction.
//
// It is the seed papers' "2-path" forwarder and the baseline every other
// engine is measured against. It needs no privilege and supports every option.
package copy

import (
	"context"
	"net"
	"sync"

	"github.com/splicer/splicer/engine"
)

// DefaultBufferSize is the user-space buffer per direction.
const DefaultBufferSize = 64 << 10

// Engine copies through user-space buffers.
type Engine struct {
	size int
	pool sync.Pool
}

// New returns a copy engine with buffers of size bytes (DefaultBufferSize when 0).
func New(size int) *Engine {
	if size <= 0 {
		size = DefaultBufferSize
	}
	e := &Engine{size: size}
	e.pool.New = func() any { b := make([]byte, size); return &b }
	return e
}

// Name is the engine's name in configurations, logs and metrics.
const Name = "copy"

// Name implements engine.Engine.
func (e *Engine) Name() string { return Name }

// Probe implements engine.Engine: copy runs everywhere.
func (e *Engine) Probe() error { return nil }

// Supports implements engine.Engine: copy honours every option.
func (e *Engine) Supports(*engine.Pair, engine.Options) error { return nil }

// Close implements engine.Engine.
func (e *Engine) Close() error { return nil }

// Splice implements engine.Engine.
func (e *Engine) Splice(ctx context.Context, p *engine.Pair, opts engine.Options) (engine.Result, error) {
	return engine.Run(ctx, p, opts, e.pump)
}

// pump reads into a pooled buffer, never past the limit, and writes all of
// each chunk before reading the next.
func (e *Engine) pump(src, dst *net.TCPConn, limit int64, moved func(int64)) error {
	bp := e.pool.Get().(*[]byte)
	defer e.pool.Put(bp)
	buf := *bp
	var done int64
	for limit == 0 || done < limit {
		chunk := buf
		if limit > 0 && int64(len(chunk)) > limit-done {
			chunk = chunk[:limit-done]
		}
		n, rerr := src.Read(chunk)
		if n > 0 {
			if _, werr := dst.Write(chunk[:n]); werr != nil {
				return engine.StalledWrite(werr)
			}
			done += int64(n)
			moved(int64(n))
		}
		if engine.IsEOF(rerr) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
	return nil
}

// ControlMode implements engine.ControlMode: copy's read/write loop is the
// proxies' own control-mode forwarding.
func (e *Engine) ControlMode() bool { return true }

// Package pipe is the engine that moves bytes with splice(2) through a pooled pipe per direction, without copying them into user space.
//
// The proxy process still wakes for every chunk, but the bytes go socket ->
// pipe -> socket inside the kernel. It needs no privilege.
package pipe

import (
	"context"
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

// DefaultPipeSize is the capacity asked of each pipe (F_SETPIPE_SZ).
const DefaultPipeSize = 1 << 20

// Engine splices through pipes.
type Engine struct {
	pool *pool
}

// New returns a pipe engine whose pipes hold size bytes (DefaultPipeSize when 0).
func New(size int) *Engine {
	if size <= 0 {
		size = DefaultPipeSize
	}
	return &Engine{pool: newPool(size, 1024)}
}

// Name is the engine's name in configurations, logs and metrics.
const Name = "pipe"

// Name implements engine.Engine.
func (e *Engine) Name() string { return Name }

// Probe implements engine.Engine: it checks that a pipe can be made.
func (e *Engine) Probe() error {
	p, err := e.pool.get()
	if err != nil {
		return fmt.Errorf("pipe engine: %w", err)
	}
	e.pool.put(p)
	return nil
}

// Supports implements engine.Engine: pipe honours every option.
func (e *Engine) Supports(*engine.Pair, engine.Options) error { return nil }

// Close implements engine.Engine: it closes the pooled pipes.
func (e *Engine) Close() error { e.pool.close(); return nil }

// Splice implements engine.Engine.
func (e *Engine) Splice(ctx context.Context, p *engine.Pair, opts engine.Options) (engine.Result, error) {
	return engine.Run(ctx, p, opts, e.pump)
}

// pump fills the pipe from src, never past the limit, then drains it all
// into dst before filling again, so an interrupted pump leaves nothing behind.
func (e *Engine) pump(src, dst *net.TCPConn, limit int64, moved func(int64)) error {
	pp, err := e.pool.get()
	if err != nil {
		return err
	}
	clean := false
	defer func() { e.pool.release(pp, clean) }()

	srcRC, err := src.SyscallConn()
	if err != nil {
		return err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	var done int64
	for limit == 0 || done < limit {
		want := int64(pp.size)
		if limit > 0 && want > limit-done {
			want = limit - done
		}
		n, rerr := spliceIn(srcRC, pp.w, int(want))
		if n > 0 {
			if werr := spliceOut(dstRC, pp.r, n); werr != nil {
				return engine.StalledWrite(werr)
			}
			done += int64(n)
			moved(int64(n))
		}
		if rerr != nil {
			clean = true
			return rerr
		}
		if n == 0 {
			clean = true
			return nil // EOF
		}
	}
	clean = true
	return nil
}

const spliceFlags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK

// spliceIn moves up to max bytes from the socket into the pipe, waiting in
// the netpoller while the socket is empty. n == 0 with nil error is EOF.
func spliceIn(rc rawConn, pipeW int, max int) (int, error) {
	var n int
	var serr error
	err := rc.Read(func(fd uintptr) bool {
		var m int64
		m, serr = unix.Splice(int(fd), nil, pipeW, nil, max, spliceFlags)
		n = int(m)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err != nil {
		return 0, err
	}
	return n, serr
}

// spliceOut moves exactly n bytes from the pipe into the socket, waiting in
// the netpoller while the socket's send buffer is full.
func spliceOut(rc rawConn, pipeR int, n int) error {
	for n > 0 {
		var m int64
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			m, serr = unix.Splice(pipeR, nil, int(fd), nil, n, spliceFlags)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		n -= int(m)
	}
	return nil
}

type rawConn interface {
	Read(func(uintptr) bool) error
	Write(func(uintptr) bool) error
}

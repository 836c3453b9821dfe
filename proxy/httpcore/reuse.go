// UpstreamPool: idle keep-alive upstream connections that any client connection of a listener may reuse, per server, bounded in number and idle time.

package httpcore

import (
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// UpstreamPool keeps upstream connections on which a response completed
// cleanly, for the next request to the same key from any client connection
// (HAProxy's http-reuse safe). A connection is taken newest first, checked
// before it is handed out (the server may have closed it meanwhile), and
// closed after IdleTimeout or when MaxIdle newer ones wait for the same key.
// Its methods are safe for concurrent use.
type UpstreamPool struct {
	maxIdle int
	timeout time.Duration

	mu     sync.Mutex
	keys   map[string]*idleList
	timer  *time.Timer // expire; armed while a connection waits
	armed  bool
	closed bool
}

// idleList is one key's idle connections, oldest first, and its counters.
type idleList struct {
	conns               []idleConn
	hits, misses, stale uint64
}

type idleConn struct {
	conn  *net.TCPConn
	since time.Time
}

// PoolStats are one key's counters: Gets answered with a connection (Hits)
// or not (Misses), connections found closed or unusable when taken
// (Stale), and the connections waiting now (Idle).
type PoolStats struct {
	Key                 string
	Hits, Misses, Stale uint64
	Idle                int
}

// NewUpstreamPool returns a pool keeping up to maxIdle connections per key,
// each for at most idleTimeout; maxIdle 0 keeps none.
func NewUpstreamPool(maxIdle int, idleTimeout time.Duration) *UpstreamPool {
	return &UpstreamPool{maxIdle: maxIdle, timeout: idleTimeout, keys: map[string]*idleList{}}
}

// Get returns an idle connection to key that can carry a request, or nil.
// Connections the server closed, or that hold unexpected bytes, are closed
// on the way.
func (p *UpstreamPool) Get(key string) *net.TCPConn {
	for {
		c := p.pop(key)
		if c == nil {
			return nil
		}
		if Reusable(c) {
			return c
		}
		c.Close()
		p.count(key, func(l *idleList) { l.hits--; l.stale++ })
	}
}

// pop takes key's newest connection that has not expired, counting a hit,
// or counts a miss.
func (p *UpstreamPool) pop(key string) *net.TCPConn {
	p.mu.Lock()
	l := p.list(key)
	var c *net.TCPConn
	if n := len(l.conns); n > 0 && time.Since(l.conns[n-1].since) < p.timeout {
		c = l.conns[n-1].conn
		l.conns[n-1] = idleConn{}
		l.conns = l.conns[:n-1]
	}
	if c != nil {
		l.hits++
	} else {
		l.misses++
	}
	p.mu.Unlock()
	return c
}

func (p *UpstreamPool) count(key string, f func(*idleList)) {
	p.mu.Lock()
	f(p.list(key))
	p.mu.Unlock()
}

// list is key's list, made on first use; p.mu held.
func (p *UpstreamPool) list(key string) *idleList {
	l := p.keys[key]
	if l == nil {
		l = &idleList{}
		p.keys[key] = l
	}
	return l
}

// Put offers c, idle with nothing owed either way, for the next request to
// key. It reports whether the pool took it; if not, the caller closes it.
func (p *UpstreamPool) Put(key string, c *net.TCPConn) bool {
	var evicted *net.TCPConn
	p.mu.Lock()
	ok := !p.closed && p.maxIdle > 0
	if ok {
		l := p.list(key)
		if len(l.conns) >= p.maxIdle {
			evicted = l.conns[0].conn
			l.conns = slices.Delete(l.conns, 0, 1)
		}
		l.conns = append(l.conns, idleConn{conn: c, since: time.Now()})
		p.armLocked(p.timeout)
	}
	p.mu.Unlock()
	if evicted != nil {
		evicted.Close()
	}
	return ok
}

// armLocked has expire run in d unless it is already due; p.mu held.
func (p *UpstreamPool) armLocked(d time.Duration) {
	if p.armed || p.closed {
		return
	}
	p.armed = true
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.expire)
	} else {
		p.timer.Reset(d)
	}
}

// expire closes the connections idle for the timeout and runs again when
// the oldest of the others is due.
func (p *UpstreamPool) expire() {
	now := time.Now()
	var dead []*net.TCPConn
	var next time.Duration
	p.mu.Lock()
	p.armed = false
	for _, l := range p.keys {
		n := 0
		for n < len(l.conns) && now.Sub(l.conns[n].since) >= p.timeout {
			dead = append(dead, l.conns[n].conn)
			n++
		}
		l.conns = slices.Delete(l.conns, 0, n)
		if len(l.conns) > 0 {
			if d := p.timeout - now.Sub(l.conns[0].since); next == 0 || d < next {
				next = d
			}
		}
	}
	if next > 0 {
		p.armLocked(next)
	}
	p.mu.Unlock()
	for _, c := range dead {
		c.Close()
	}
}

// Stats returns every key's counters.
func (p *UpstreamPool) Stats() []PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PoolStats, 0, len(p.keys))
	for k, l := range p.keys {
		out = append(out, PoolStats{Key: k, Hits: l.hits, Misses: l.misses, Stale: l.stale, Idle: len(l.conns)})
	}
	return out
}

// Close closes every idle connection; Put refuses connections afterwards.
func (p *UpstreamPool) Close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	var all []*net.TCPConn
	for _, l := range p.keys {
		for _, ic := range l.conns {
			all = append(all, ic.conn)
		}
		l.conns = nil
	}
	p.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// Reusable reports whether an idle connection can carry a request: nothing
// to read on it, checked without blocking. A server that closed it left an
// EOF (or a reset) there; bytes would be a response nobody asked for.
func Reusable(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	idle := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		idle = errors.Is(rerr, unix.EAGAIN)
		return true
	})
	return err == nil && idle
}

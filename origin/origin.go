// Package origin is the built-in origin server that splicer demo, splicer bench and the lab tests talk to through the forwarder.
//
// One Server serves several protocols, each on a listener the caller created
// (inside a network namespace, say; this package knows nothing of them):
//
//	echo    every byte back; on the client's FIN, finish echoing, then FIN
//	sink    read and discard until FIN, then FIN
//	source  an endless pseudo-random stream until the peer goes away
//	rr      netperf-style request/response: read exactly N bytes, write them back
//	http    GET /obj/<size> (exactly size deterministic bytes), GET /health
//	stream  both directions verified end to end: see StreamCheck
//
// rr differs from echo only in framing: it answers each complete N-byte
// request with one write, as netperf's TCP_RR server does, where echo answers
// whatever each read returned. Clients that send N and wait for N work
// against either.
//
// Usage:
//
//	srv := origin.New(logger)
//	defer srv.Close()
//	l, err := net.Listen("tcp", "127.0.0.1:0")
//	...
//	if err := srv.Serve(origin.Echo, l); err != nil {
//		...
//	}
package origin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Proto names a protocol the origin serves on a listener.
type Proto string

// The protocols; see the package documentation.
const (
	Echo   Proto = "echo"
	Sink   Proto = "sink"
	Source Proto = "source"
	RR     Proto = "rr"
	HTTP   Proto = "http"
	Stream Proto = "stream"
)

// Protos lists every protocol, in a stable order.
func Protos() []Proto { return []Proto{Echo, Sink, Source, RR, HTTP, Stream} }

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("origin: server closed")

// Option tunes one Serve call.
type Option func(*serveConfig)

type serveConfig struct {
	rrSize int
	name   string
}

// WithRRSize sets the request and response size of an rr listener; the
// default is 1 byte.
func WithRRSize(n int) Option { return func(c *serveConfig) { c.rrSize = n } }

// WithName makes an http listener send an X-Origin-Name header with name on
// every response, so that routing tests can tell origins apart.
func WithName(name string) Option { return func(c *serveConfig) { c.name = name } }

// Counters are one protocol's totals since New.
type Counters struct {
	Accepted int64 // connections accepted
	Active   int64 // connections open now
	BytesIn  int64 // bytes read from clients
	BytesOut int64 // bytes written to clients
	Requests int64 // HTTP requests answered (http only)
}

// counters is the live, atomically updated form of Counters.
type counters struct {
	accepted, active, in, out, requests atomic.Int64
}

func (c *counters) snapshot() Counters {
	return Counters{
		Accepted: c.accepted.Load(),
		Active:   c.active.Load(),
		BytesIn:  c.in.Load(),
		BytesOut: c.out.Load(),
		Requests: c.requests.Load(),
	}
}

// handler serves one accepted connection until it ends; the Server closes
// the connection afterwards.
type handler func(conn net.Conn, c *counters) error

// Server serves the origin protocols on any number of listeners. Close stops
// all of them and waits for every goroutine the Server started.
type Server struct {
	log   *slog.Logger
	stats map[Proto]*counters // fixed at New, so reads need no lock
	done  chan struct{}       // closed by Close, to interrupt accept backoff
	wg    sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	https     []*http.Server
}

// New returns a Server that logs to log; a nil log discards.
func New(log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		log:       log,
		stats:     make(map[Proto]*counters),
		done:      make(chan struct{}),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
	}
	for _, p := range Protos() {
		s.stats[p] = new(counters)
	}
	return s
}

// Serve starts serving proto on l in the background and returns at once.
// The Server owns l from then on, even when Serve fails: it closes l on
// error and on Close.
func (s *Server) Serve(proto Proto, l net.Listener, opts ...Option) error {
	cfg := serveConfig{rrSize: 1}
	for _, opt := range opts {
		opt(&cfg)
	}
	h, err := s.handlerFor(proto, cfg)
	if err != nil {
		l.Close()
		return err
	}
	c := s.stats[proto]

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.Close()
		return ErrServerClosed
	}
	if proto == HTTP {
		hs := s.newHTTPServer(cfg, c)
		s.https = append(s.https, hs)
		s.wg.Go(func() { s.serveHTTP(hs, &countingListener{Listener: l, s: s, c: c}) })
	} else {
		s.listeners[l] = struct{}{}
		s.wg.Go(func() { s.acceptLoop(proto, l, h, c) })
	}
	s.log.Info("origin serving", "proto", proto, "addr", l.Addr())
	return nil
}

func (s *Server) handlerFor(proto Proto, cfg serveConfig) (handler, error) {
	switch proto {
	case Echo:
		return serveEcho, nil
	case Sink:
		return serveSink, nil
	case Source:
		return serveSource, nil
	case RR:
		if cfg.rrSize <= 0 {
			return nil, fmt.Errorf("origin: rr size %d, want > 0", cfg.rrSize)
		}
		return rrHandler(cfg.rrSize), nil
	case Stream:
		return serveStream, nil
	case HTTP:
		return nil, nil // net/http accepts for itself
	}
	return nil, fmt.Errorf("origin: unknown protocol %q", proto)
}

// acceptLoop accepts until l is closed, serving each connection in its own
// goroutine.
func (s *Server) acceptLoop(proto Proto, l net.Listener, h handler, c *counters) {
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if s.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Like net/http: a full fd table or similar passes; don't spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("origin accept", "proto", proto, "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-s.done:
				return
			}
		}
		backoff = 0
		if !s.track(conn, c) {
			conn.Close()
			return
		}
		s.wg.Go(func() {
			defer s.untrack(conn, c)
			if err := h(conn, c); err != nil {
				// Resets and cut connections are routine for a test origin.
				s.log.Debug("origin conn ended", "proto", proto, "remote", conn.RemoteAddr(), "err", err)
			}
		})
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track registers conn so that Close can cut it; it reports false once the
// Server is closed.
func (s *Server) track(conn net.Conn, c *counters) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = struct{}{}
	c.accepted.Add(1)
	c.active.Add(1)
	return true
}

func (s *Server) untrack(conn net.Conn, c *counters) {
	conn.Close()
	s.forget(conn, c)
}

// forget undoes track, once per tracked conn.
func (s *Server) forget(conn net.Conn, c *counters) {
	c.active.Add(-1)
	s.mu.Lock()
	delete(s.conns, conn)
	s.mu.Unlock()
}

// Close stops every listener, cuts every connection and waits for all the
// Server's goroutines to return. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.done)
	listeners, conns, https := s.listeners, s.conns, s.https
	s.listeners, s.conns, s.https = nil, make(map[net.Conn]struct{}), nil
	s.mu.Unlock()

	// Closing outside the lock: a closing http conn calls forget, which locks.
	for l := range listeners {
		l.Close()
	}
	for conn := range conns {
		conn.Close()
	}
	for _, hs := range https {
		hs.Close()
	}
	s.wg.Wait()
	return nil
}

// Stats returns each protocol's counters.
func (s *Server) Stats() map[Proto]Counters {
	out := make(map[Proto]Counters, len(s.stats))
	for p, c := range s.stats {
		out[p] = c.snapshot()
	}
	return out
}

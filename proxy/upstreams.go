// Connecting a client of a tcp or filter listener to a server of its upstream list, the next one tried when one does not connect.

package proxy

import (
	"context"
	"errors"
	"net"
	"time"
)

// ErrNoHealthyUpstream: every server of the list failed its last health
// check, is drained or is full, past the queue's timeout if it has one
// (close reason upstream_unreachable).
var ErrNoHealthyUpstream = errors.Join(ErrUpstreamUnreachable, errors.New("no upstream to pick: each failed its last health check, is drained or is full (max_conns, past queue_timeout)"))

// UpstreamsError is every failed connect of one Pool.Dial, in the order
// they were tried.
type UpstreamsError struct{ Errs []error }

func (e *UpstreamsError) Error() string { return errors.Join(e.Errs...).Error() }

func (e *UpstreamsError) Unwrap() []error { return e.Errs }

// Last is the error of the last connect tried.
func (e *UpstreamsError) Last() error { return e.Errs[len(e.Errs)-1] }

// Dial connects s to the server the pool picks for its client (Pick,
// keyed by the client's address), trying the next pick when one does not
// connect, each healthy server once: those not skipped for failures
// first, so that a list whose every healthy server is skipped is still
// tried whole. Servers that failed their health check, drained ones and
// full ones are not tried (ErrNoHealthyUpstream when no other is left);
// with every usable server full, it waits for a place up to the pool's
// QueueTimeout, as long as its client does not leave (leaving: what tells
// it has, ErrClientLeft). It returns the connection and its server, whose
// Release the caller calls once done with it (least_conn and max_conns
// count it until then), or an *UpstreamsError.
func (p *Pool) Dial(ctx context.Context, s Session, leaving Leaving) (*net.TCPConn, *Server, error) {
	var key string
	if p.Balance == "consistent_hash" {
		key = clientKey(s)
	}
	var tried map[*Server]bool
	var errs []error
	var queued time.Time
	for {
		srv := p.Pick(key, tried)
		if srv == nil {
			if errs != nil {
				return nil, nil, &UpstreamsError{Errs: errs}
			}
			again, err := p.WaitForPlace(ctx, &queued, tried, Waiter{Conn: s.Pair().Client, Leaving: leaving})
			if err != nil {
				return nil, nil, err
			}
			if again {
				continue
			}
			return nil, nil, ErrNoHealthyUpstream
		}
		if !srv.Hold() {
			continue // full since Pick looked: the next Pick sees it full
		}
		up, err := s.Dial(ctx, srv.Addr)
		if err == nil {
			p.Succeeded(srv)
			return up, srv, nil
		}
		srv.Release()
		errs = append(errs, err)
		s.Log().Warn("upstream connect failed", "pool", p.Name, "server", srv.Addr, "err", err)
		if ctx.Err() != nil {
			return nil, nil, &UpstreamsError{Errs: errs}
		}
		p.Failed(srv, s.Log())
		tried = with(tried, srv)
	}
}

// with adds s to the set m, made on first use: a connection whose first
// pick connects makes none.
func with(m map[*Server]bool, s *Server) map[*Server]bool {
	if m == nil {
		m = map[*Server]bool{}
	}
	m[s] = true
	return m
}

// clientKey is what consistent_hash hashes for a client connection: its
// address without the port, so that a client keeps its server across
// connections (HAProxy's balance source).
func clientKey(s Session) string {
	if a, ok := s.Pair().ClientAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// Active health checks of upstream servers: connect (and, given a path, GET it) every interval; a server that fails is marked unhealthy until it passes again.

package proxy

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// CheckDialer connects where the forwarder runs (its network namespace in
// tests).
type CheckDialer func(ctx context.Context, network, addr string) (net.Conn, error)

// SendingProxyHeader is d sending, on each connection, the PROXY protocol
// header of version v ("v1", "v2") for a connection of the forwarder's
// own (proxyproto.Local), as HAProxy's checks do of a server with
// send-proxy: a back-end that takes the header on every connection would
// refuse a check without one, and be marked down. Empty v: d itself.
func (d CheckDialer) SendingProxyHeader(v string) CheckDialer {
	if v == "" || d == nil {
		return d
	}
	hdr, herr := proxyproto.Local(v) // the same for every check
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if herr != nil {
			return nil, herr
		}
		c, err := d(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(hdr); err != nil {
			c.Close()
			return nil, fmt.Errorf("write PROXY protocol header: %w", err)
		}
		return c, nil
	}
}

// healthChecks runs a pool's health checks, one for each server from
// when it joins the pool's set to when it leaves it (a name that
// resolves to other addresses) or the pool closes.
type healthChecks struct {
	hc   config.HealthCheck
	dial CheckDialer
	log  *slog.Logger
	pool string

	mu      sync.Mutex // guards what follows
	ctx     context.Context
	cancel  context.CancelFunc
	running map[*Server]context.CancelFunc
	wg      sync.WaitGroup
}

// start has follow check each server as hc says, dialling with dial.
func (h *healthChecks) start(hc config.HealthCheck, dial CheckDialer, log *slog.Logger, pool string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hc, h.dial, h.log, h.pool = hc, dial, log, pool
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.running = map[*Server]context.CancelFunc{}
}

// follow checks each of servers not yet checked, and ends the checks of
// the servers no longer among them; nothing before start.
func (h *healthChecks) follow(servers []*Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil || h.ctx.Err() != nil {
		return
	}
	now := make(map[*Server]bool, len(servers))
	for _, s := range servers {
		now[s] = true
		if h.running[s] == nil {
			h.run(s)
		}
	}
	for s, cancel := range h.running {
		if !now[s] {
			cancel()
			delete(h.running, s)
		}
	}
}

// run starts the checks of s. A server found under a name is checked
// with that name as the Host of a GET, as the server given by name was
// before it resolved to several.
func (h *healthChecks) run(s *Server) {
	ctx, cancel := context.WithCancel(h.ctx)
	h.running[s] = cancel
	hc := h.hc
	if s.host != s.Addr {
		hc.Host = cmp.Or(hc.Host, s.host)
	}
	h.wg.Go(func() { CheckHealth(ctx, hc, s.Addr, &s.healthy, h.dial, h.log, "pool", h.pool) })
}

// stop ends every check and waits for them.
func (h *healthChecks) stop() {
	h.mu.Lock()
	if h.cancel != nil {
		h.cancel()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// CheckHealth checks addr as hc says now and then every interval until ctx
// ends: hc's fall checks failed in a row mark a healthy server unhealthy in
// healthy, its rise checks passed in a row healthy again, each change
// logged; what names the server in the log ("pool", "web", say).
func CheckHealth(ctx context.Context, hc config.HealthCheck, addr string, healthy *atomic.Bool, dial CheckDialer, log *slog.Logger, what ...any) {
	t := time.NewTicker(hc.Interval.Std())
	defer t.Stop()
	fall, rise := hc.Thresholds()
	streak := 0 // checks in a row that disagree with healthy
	for {
		err := Probe(ctx, addr, hc, dial)
		if ctx.Err() != nil {
			return
		}
		was := healthy.Load()
		if was == (err == nil) {
			streak = 0
		} else {
			streak++
		}
		need := rise
		if was {
			need = fall
		}
		if streak >= need {
			streak = 0
			healthy.Store(!was)
			args := append(append([]any(nil), what...), "server", addr)
			if err != nil {
				log.Warn("server failed its health check, skipping it", append(args, "err", err, "checks", fall)...)
			} else {
				log.Info("server passed its health check again", append(args, "checks", rise)...)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Probe connects to addr within hc's timeout and, if hc has a path,
// sends GET path (with hc's Host, or addr) and wants a 2xx or 3xx answer
// within the same timeout.
func Probe(ctx context.Context, addr string, hc config.HealthCheck, dial CheckDialer) error {
	ctx, cancel := context.WithTimeout(ctx, hc.Timeout.Std())
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if hc.Path == "" {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	host := cmp.Or(hc.Host, addr)
	req := "GET " + hc.Path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: splicer-health-check\r\nConnection: close\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("health check answered %s", resp.Status)
	}
	return nil
}

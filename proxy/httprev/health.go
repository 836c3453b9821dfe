// Active health checks: GET a pool's health path on each server every interval; a server that fails is skipped until it passes again.

package httprev

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// DialFunc connects where the forwarder runs (its network namespace in tests).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// checkHealth checks s now and then every interval until ctx ends.
func checkHealth(ctx context.Context, p *Pool, s *Server, dial DialFunc, log *slog.Logger) {
	t := time.NewTicker(p.Health.Interval.Std())
	defer t.Stop()
	for {
		err := probe(ctx, s.Addr, p.Health.Path, p.Health.Timeout.Std(), dial)
		if ctx.Err() != nil {
			return
		}
		if was := s.healthy.Swap(err == nil); was != (err == nil) {
			if err != nil {
				log.Warn("server failed its health check, skipping it", "pool", p.Name, "server", s.Addr, "err", err)
			} else {
				log.Info("server passed its health check again", "pool", p.Name, "server", s.Addr)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe sends one GET path to addr and wants a 2xx or 3xx answer within timeout.
func probe(ctx context.Context, addr, path string, timeout time.Duration, dial DialFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: splicer-health-check\r\nConnection: close\r\n\r\n"
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

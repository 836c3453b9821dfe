// Package admin serves the forwarder's admin endpoints: GET /metrics (Prometheus text), GET /flows (JSON), GET /healthz (alive), GET /ready (accepting; 503 while draining).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/splicer/splicer/forwarder"
)

// Server is the admin HTTP server of one forwarder.
type Server struct {
	srv *http.Server
	mux *http.ServeMux
	ln  net.Listener
	log *slog.Logger
}

// Handler returns the admin routes for f.
func Handler(f *forwarder.Forwarder) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(f.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /flows", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(f.Flows().Snapshot())
	})
	// /healthz: the process is alive and answers (a liveness probe).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	// /ready: the forwarder accepts new connections (a readiness probe, a
	// load balancer's check); 503 once it drains for a shutdown or upgrade.
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if f.Draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}

// Start listens on addr and serves f's admin endpoints in the background.
func Start(addr string, f *forwarder.Forwarder, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, f, log), nil
}

// Serve serves f's admin endpoints on ln (e.g. a socket inherited from the
// process this one replaced) in the background.
func Serve(ln net.Listener, f *forwarder.Forwarder, log *slog.Logger) *Server {
	mux := Handler(f)
	s := &Server{ln: ln, log: log, mux: mux, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	log.Info("admin listening", "addr", ln.Addr().String())
	return s
}

// Handle adds an endpoint, e.g. the daemon's POST /reload.
func (s *Server) Handle(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, h) }

// File returns a duplicate of the listening socket, to hand to a new process.
func (s *Server) File() (*os.File, error) {
	fl, ok := s.ln.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, errors.New("admin socket cannot be handed over")
	}
	return fl.File()
}

// Addr is the address the admin server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the admin server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

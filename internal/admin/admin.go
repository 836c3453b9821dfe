// Package admin serves the forwarder's admin endpoints: GET /metrics (Prometheus text), GET /flows and /upstreams (JSON), POST /upstreams/drain and /ready, GET /healthz (alive), GET /ready (accepting; 503 while draining); guarded by a token or, without one, against browsers (guard.go).
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/metrics"
)

// Forwarder is what the admin endpoints read and drive of a running
// forwarder (*forwarder.Forwarder is one). The documents it returns are
// only encoded as JSON, so admin needs none of the forwarder's types and
// sits below it: a leaf that links no engine or proxy.
type Forwarder interface {
	// Metrics is the registry GET /metrics serves.
	Metrics() *metrics.Metrics
	// Draining reports a shutdown or upgrade under way: GET /ready is 503.
	Draining() bool
	// FlowsReport is GET /flows: a snapshot of every pair.
	FlowsReport() any
	// UpstreamsReport is GET /upstreams: every back-end server's state.
	UpstreamsReport() any
	// DrainReport drains (on) or readies a back-end server, in listener
	// and pool if not empty, and returns the servers' new state; found is
	// false when no running listener has it.
	DrainReport(listener, pool, server string, on bool) (doc any, found bool)
}

// Server is the admin HTTP server of one forwarder.
type Server struct {
	srv *http.Server
	mux *http.ServeMux
	ln  net.Listener
	log *slog.Logger
}

// Handler returns the admin routes for f.
func Handler(f Forwarder) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(f.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /flows", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, f.FlowsReport())
	})
	// /upstreams: every back-end server of the running listeners, its
	// health check, whether failures have it skipped, and how many.
	mux.HandleFunc("GET /upstreams", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, f.UpstreamsReport())
	})
	// POST /upstreams/drain and /upstreams/ready, ?server=HOST:PORT and
	// optionally &listener=NAME&pool=NAME: stop or resume picking a
	// back-end server at run time; 404 when no running listener has it.
	mux.HandleFunc("POST /upstreams/drain", drainHandler(f, true))
	mux.HandleFunc("POST /upstreams/ready", drainHandler(f, false))
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

// WriteJSON answers with v as indented JSON, as every admin route that
// returns a document does (the master's, which gathers its workers',
// too).
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// drainHandler drains (on) or readies a server named in the query and
// answers with its new state in each listener and pool that has it.
func drainHandler(f Forwarder, on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		server := q.Get("server")
		if server == "" {
			http.Error(w, "missing server=HOST:PORT", http.StatusBadRequest)
			return
		}
		got, found := f.DrainReport(q.Get("listener"), q.Get("pool"), server, on)
		if !found {
			http.Error(w, "no running listener has back-end server "+server+where(q.Get("listener"), q.Get("pool")), http.StatusNotFound)
			return
		}
		WriteJSON(w, got)
	}
}

// where names the listener and pool a request was limited to, if any.
func where(listener, pool string) string {
	s := ""
	if listener != "" {
		s += " in listener " + listener
	}
	if pool != "" {
		s += " in pool " + pool
	}
	return s
}

// Start listens on addr and serves f's admin endpoints in the background.
func Start(addr string, f Forwarder, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, f, log), nil
}

// Serve serves f's admin endpoints on ln (e.g. a socket inherited from the
// process this one replaced) in the background.
func Serve(ln net.Listener, f Forwarder, log *slog.Logger) *Server {
	return ServeWith(ln, f, log, Options{})
}

// Options harden the admin server.
type Options struct {
	// Token, if set, must come as "Authorization: Bearer TOKEN" on every
	// request but GET /healthz and GET /ready (probes, which show nothing).
	// Without it, a TCP endpoint answers only requests addressed to
	// loopback by name (see guardBrowsers).
	Token string
}

// ServeWith is Serve with options.
func ServeWith(ln net.Listener, f Forwarder, log *slog.Logger, o Options) *Server {
	return ServeMux(ln, Handler(f), log, o)
}

// ServeMux serves mux as the admin endpoint on ln, with the options'
// hardening (a master serves its workers' endpoints this way).
func ServeMux(ln net.Listener, mux *http.ServeMux, log *slog.Logger, o Options) *Server {
	s := &Server{ln: ln, log: log, mux: mux, srv: &http.Server{Handler: guardBrowsers(ln.Addr(), o.Token, requireToken(o.Token, mux)),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute}}
	if o.Token == "" && network(ln.Addr()) {
		log.Warn("admin endpoint reachable beyond loopback without admin_token: anyone who reaches it sees every pair, can reload or upgrade, and drain back-end servers", "addr", ln.Addr().String())
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	log.Info("admin listening", "addr", ln.Addr().String())
	return s
}

// requireToken lets a request through when it carries the bearer token
// (compared in constant time), or is a probe.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/ready")
		if !probe && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="splicer admin"`)
			http.Error(w, "unauthorized: admin_token required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// network reports whether a is reachable beyond this host: a TCP address
// other than loopback (not a worker's unix socket, say).
func network(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && !ta.IP.IsLoopback()
}

// Handle adds an endpoint, e.g. the daemon's POST /reload.
func (s *Server) Handle(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, h) }

// File returns a duplicate of the listening socket, to hand to a new process.
func (s *Server) File() (*os.File, error) {
	sc, ok := s.ln.(syscall.Conn)
	if !ok {
		return nil, errors.New("admin socket cannot be handed over")
	}
	return handoff.Dup(sc)
}

// Addr is the address the admin server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the admin server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

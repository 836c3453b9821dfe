// The master's admin endpoint: each worker's answers gathered into one (metrics labelled by worker, pairs, back-end servers), and drain, reload and upgrade passed to every worker.

package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/metrics"
)

// workerAnswerTimeout bounds a worker's answer to the master's admin
// request (a reload or an upgrade takes longer: UpgradeTimeout).
const workerAnswerTimeout = 10 * time.Second

type masterAdmin struct {
	srv     *admin.Server
	clients []*http.Client // one per worker, over its admin socket
}

func (a *masterAdmin) close() {
	if a != nil && a.srv != nil {
		a.srv.Close()
	}
}

// serveAdmin serves the admin endpoint on ln (bound by the master, or
// handed over by its upgrade or its root parent) for every worker; with
// ln nil (no admin address), the master still talks to each worker on
// its admin socket.
func (m *master) serveAdmin(cfg *config.Config, ln net.Listener) error {
	m.admin = &masterAdmin{}
	for i := range m.count {
		path := m.adminPath(i)
		m.admin.clients = append(m.admin.clients, &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", path)
			}}})
	}
	own := metrics.NewMaster(m.count)
	m.restarts = own.Restarts
	if ln == nil {
		return nil // no admin endpoint
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{own.Registry, workerMetrics{m}},
		promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: slogPrinter{m}}))
	mux.HandleFunc("GET /flows", m.flows)
	mux.HandleFunc("GET /upstreams", m.upstreams)
	mux.HandleFunc("POST /upstreams/drain", m.drain)
	mux.HandleFunc("POST /upstreams/ready", m.drain)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /ready", m.ready)
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		notes, err := m.reloadLogged("admin")
		answer(w, strings.Join(notes, "\n"), err)
	})
	mux.HandleFunc("POST /upgrade", func(w http.ResponseWriter, r *http.Request) {
		err := m.upgradeLogged("admin")
		answer(w, fmt.Sprintf("every worker upgraded; the master runs %s", m.exe), err)
	})
	m.admin.srv = admin.ServeMux(ln, mux, m.log, admin.Options{Token: cfg.AdminToken})
	return nil
}

// slogPrinter logs promhttp's errors (a worker that did not answer).
type slogPrinter struct{ m *master }

func (p slogPrinter) Println(v ...any) { p.m.log.Warn("metrics: " + fmt.Sprint(v...)) }

// ask sends a request to worker i's admin endpoint and returns the body
// of its answer with the status.
func (m *master) ask(ctx context.Context, i int, method, path string, timeout time.Duration) ([]byte, int, error) {
	body, _, status, err := m.askWith(ctx, i, method, path, nil, timeout)
	return body, status, err
}

// askWith is ask with the request's header h, returning the answer's
// header too.
func (m *master) askWith(ctx context.Context, i int, method, path string, h http.Header, timeout time.Duration) ([]byte, http.Header, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://worker"+path, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	maps.Copy(req.Header, h)
	resp, err := m.admin.clients[i].Do(req)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("worker %d: %w", i, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.Header, resp.StatusCode, err
}

// askEach asks every worker, in order, and returns the answers that came
// (nil for a worker that did not answer: one restarting, say).
func (m *master) askEach(r *http.Request, method, path string) [][]byte {
	out := make([][]byte, m.count)
	for i := range m.count {
		body, status, err := m.ask(r.Context(), i, method, path, workerAnswerTimeout)
		if err != nil || status != http.StatusOK {
			m.log.Warn("admin: a worker did not answer", "worker", i, "path", path, "status", status, "err", err)
			continue
		}
		out[i] = body
	}
	return out
}

// workerMetrics gathers every worker's metrics, each labelled with its
// worker: per-process counters stay apart, and sum() adds them up.
type workerMetrics struct{ m *master }

func (g workerMetrics) Gather() ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	var names []string
	var errs []error
	for i := range g.m.count {
		fams, err := g.m.workerFamilies(i)
		if err != nil {
			errs = append(errs, err)
		}
		for _, mf := range fams {
			label := &dto.LabelPair{Name: new("worker"), Value: new(strconv.Itoa(i))}
			for _, metric := range mf.Metric {
				metric.Label = append(metric.Label, label)
				slices.SortFunc(metric.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
			}
			if have := byName[mf.GetName()]; have != nil {
				have.Metric = append(have.Metric, mf.Metric...)
				continue
			}
			byName[mf.GetName()] = mf
			names = append(names, mf.GetName())
		}
	}
	out := make([]*dto.MetricFamily, 0, len(names))
	for _, n := range names {
		out = append(out, byName[n])
	}
	return out, errors.Join(errs...)
}

// workerFamilies reads worker i's metrics in the protocol buffer format.
func (m *master) workerFamilies(i int) ([]*dto.MetricFamily, error) {
	accept := http.Header{"Accept": {string(expfmt.NewFormat(expfmt.TypeProtoDelim))}}
	body, h, _, err := m.askWith(context.Background(), i, http.MethodGet, "/metrics", accept, workerAnswerTimeout)
	if err != nil {
		return nil, err
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.ResponseFormat(h))
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("worker %d: %w", i, err)
		}
		out = append(out, mf)
	}
}

// flows is every worker's open pairs, each naming its worker.
func (m *master) flows(w http.ResponseWriter, r *http.Request) {
	all := []forwarder.Flow{}
	for i, body := range m.askEach(r, http.MethodGet, "/flows") {
		var fl []forwarder.Flow
		if body == nil || json.Unmarshal(body, &fl) != nil {
			continue
		}
		for j := range fl {
			fl[j].Worker = new(i)
		}
		all = append(all, fl...)
	}
	admin.WriteJSON(w, all)
}

// upstreams is every back-end server once, as the workers together see
// it (mergeUpstreams).
func (m *master) upstreams(w http.ResponseWriter, r *http.Request) {
	admin.WriteJSON(w, mergeUpstreams(m.askEach(r, http.MethodGet, "/upstreams")))
}

// mergeUpstreams joins the workers' tables: a server is healthy and
// drained only if every worker says so (each checks it, and a drain goes
// to all), skipped if any skips it; failures and active connections add
// up.
func mergeUpstreams(answers [][]byte) []forwarder.UpstreamState {
	out := []forwarder.UpstreamState{}
	at := map[[3]string]int{}
	for _, body := range answers {
		var states []forwarder.UpstreamState
		if body == nil || json.Unmarshal(body, &states) != nil {
			continue
		}
		for _, s := range states {
			k := [3]string{s.Listener, s.Pool, s.Server}
			i, seen := at[k]
			if !seen {
				at[k] = len(out)
				out = append(out, s)
				continue
			}
			o := &out[i]
			o.Healthy = o.Healthy && s.Healthy
			o.Drained = o.Drained && s.Drained
			o.Skipped = o.Skipped || s.Skipped
			o.Failures += s.Failures
			o.Active += s.Active
		}
	}
	return out
}

// drain passes POST /upstreams/drain or /ready to every worker: 404
// when none has the server, else the merged state.
func (m *master) drain(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path + "?" + r.URL.RawQuery
	answers := make([][]byte, m.count)
	var refused []byte
	refusedStatus, took := 0, false
	for i := range m.count {
		body, st, err := m.ask(r.Context(), i, http.MethodPost, path, workerAnswerTimeout)
		switch {
		case err != nil:
			http.Error(w, fmt.Sprintf("%v (the workers before it took the change)", err), http.StatusBadGateway)
			return
		case st == http.StatusOK:
			answers[i], took = body, true
		default:
			refused, refusedStatus = body, st
		}
	}
	if !took {
		http.Error(w, string(bytes.TrimSpace(refused)), refusedStatus)
		return
	}
	admin.WriteJSON(w, mergeUpstreams(answers))
}

// ready is 200 while the master serves and every worker is ready.
func (m *master) ready(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	if stopping {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	for i := range m.count {
		if _, st, err := m.ask(r.Context(), i, http.MethodGet, "/ready", workerAnswerTimeout); err != nil || st != http.StatusOK {
			http.Error(w, fmt.Sprintf("worker %d not ready", i), http.StatusServiceUnavailable)
			return
		}
	}
	w.Write([]byte("ready\n"))
}

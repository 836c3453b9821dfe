// What a scrape of the registry shows: engine bytes and events in families of their own, and bucket bounds a person reads.

package metrics

import (
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/splicer/splicer/internal/testenv"
)

// fakeEngine keeps counters as sockmap's and ip's do: events and bytes in
// one map.
type fakeEngine map[string]uint64

func (fakeEngine) Name() string                  { return "fake" }
func (e fakeEngine) Counters() map[string]uint64 { return e }

// scrape returns what GET /metrics on m's registry answers.
func scrape(tb testing.TB, m *Metrics) string {
	tb.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	tb.Cleanup(srv.Close)
	_, body := testenv.Get(tb, srv.URL)
	return string(body)
}

// family returns the gathered family name, nil when m has no series of it.
func family(tb testing.TB, m *Metrics, name string) *dto.MetricFamily {
	tb.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestEngineBytesAndEventsApart(t *testing.T) {
	m := New()
	m.RegisterEngines([]Engine{fakeEngine{"redirects": 3, "kernel_bytes": 4096, "user_bytes": 512, "drop_no_peer": 1}})
	events := family(t, m, "splicer_engine_events_total")
	if events == nil {
		t.Fatal("no splicer_engine_events_total")
	}
	got := map[string]float64{}
	for _, s := range events.GetMetric() {
		ev := label(s, "event")
		if strings.Contains(ev, "bytes") {
			t.Errorf("splicer_engine_events_total{event=%q} counts bytes among events", ev)
		}
		got[ev] = s.GetCounter().GetValue()
	}
	if got["redirects"] != 3 || got["drop_no_peer"] != 1 {
		t.Errorf("events %v, want redirects 3 and drop_no_peer 1", got)
	}
	bytes := family(t, m, "splicer_engine_bytes_total")
	if bytes == nil {
		t.Fatal("no splicer_engine_bytes_total: engine byte counters have no family of their own")
	}
	got = map[string]float64{}
	for _, s := range bytes.GetMetric() {
		if e := label(s, "engine"); e != "fake" {
			t.Errorf("splicer_engine_bytes_total{engine=%q}, want fake", e)
		}
		got[label(s, "kind")] = s.GetCounter().GetValue()
	}
	if len(got) != 2 || got["kernel"] != 4096 || got["user"] != 512 {
		t.Errorf("splicer_engine_bytes_total by kind %v, want kernel 4096 and user 512 only", got)
	}
}

var leRE = regexp.MustCompile(`^(splicer_[a-z_]+)_bucket\{.*le="([^"]+)"`)

func TestBucketBoundsReadable(t *testing.T) {
	m := New()
	// A series in every histogram, whatever its labels.
	histograms := 0
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		h, ok := v.Field(i).Interface().(*prometheus.HistogramVec)
		if !ok {
			continue
		}
		histograms++
		for n := range 4 {
			if o, err := h.GetMetricWithLabelValues(make([]string, n)...); err == nil {
				o.Observe(time.Millisecond.Seconds())
				break
			}
		}
	}
	seen := map[string]int{}
	for _, line := range strings.Split(scrape(t, m), "\n") {
		g := leRE.FindStringSubmatch(line)
		if g == nil || g[2] == "+Inf" {
			continue
		}
		seen[g[1]]++
		le, err := strconv.ParseFloat(g[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if round, _ := strconv.ParseFloat(strconv.FormatFloat(le, 'g', 3, 64), 64); round != le {
			t.Errorf("%s: bound %s has more than 3 significant digits", g[1], g[2])
		}
	}
	if len(seen) != histograms || histograms < 5 {
		t.Errorf("bounds checked in %d histograms (%v), want all %d", len(seen), seen, histograms)
	}
}

// TestSeriesMakesEachChildOnce: a Series hands out the same child for a
// value every time, made once, and its own for each value.
func TestSeriesMakesEachChildOnce(t *testing.T) {
	made := map[string]int{}
	s := NewSeries(func(v string) *string { made[v]++; return &v })
	a, b, a2 := s.Get("a"), s.Get("b"), s.Get("a")
	if a != a2 || a == b || *a != "a" || *b != "b" {
		t.Fatalf("children %q %q %q: want one per value", *a, *b, *a2)
	}
	if made["a"] != 1 || made["b"] != 1 {
		t.Fatalf("children made %v, want each once", made)
	}
}

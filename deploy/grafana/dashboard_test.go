// The Grafana dashboard's queries use exactly the metric names splicer exports: a renamed metric fails here, not on an operator's screen.

package grafana_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/metrics"
)

// dashboard is the part of Grafana's JSON model the test reads.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Query any `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var metricRE = regexp.MustCompile(`\bsplicer_[a-z0-9_]+`)

// exported lists what a running forwarder, or a master of workers, can
// export.
func exported(t *testing.T) []string {
	cfg := config.Default()
	f, err := forwarder.New(&cfg, forwarder.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// With workers, a master exports its own beside its workers'.
	return append(f.Metrics().Names(), metrics.NewMaster(2).Names()...)
}

func TestDashboardUsesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("splicer.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	names := exported(t)
	var queries []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if s, ok := v.Query.(string); ok {
			queries = append(queries, s)
		}
	}
	used := 0
	for _, q := range queries {
		for _, m := range metricRE.FindAllString(q, -1) {
			used++
			base := m
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if trimmed, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(names, trimmed) {
					base = trimmed
				}
			}
			if !slices.Contains(names, base) {
				t.Errorf("the dashboard queries %s, which splicer does not export (query %q)", m, q)
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no splicer metric")
	}
}

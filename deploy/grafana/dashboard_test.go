// The Grafana dashboard's queries use exactly the metric names splicer exports: a renamed metric fails here, not on an operator's screen.

package grafana_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/splicer/splicer/deploy/deploytest"
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

func TestDashboardUsesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("splicer.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	names := deploytest.Exported(t)
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
		u, unknown := deploytest.Check(names, q)
		used += len(u)
		for _, m := range unknown {
			t.Errorf("the dashboard queries %s, which splicer does not export (query %q)", m, q)
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no splicer metric")
	}
}

// The alerting rules pass promtool (check rules, and the unit tests of alerts_test.yaml, which make them fire on synthetic series) and query only metrics splicer exports.

package prometheus_test

import (
	"os"
	"os/exec"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/splicer/splicer/deploy/deploytest"
	"github.com/splicer/splicer/internal/testenv"
)

// rules is the part of a Prometheus rules file the test reads.
type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// promtool runs promtool with args and fails tb with its output if it
// fails. Without promtool the test skips, and fails under CI.
func promtool(tb testing.TB, args ...string) {
	tb.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.SkipOrFail(tb, "promtool not installed (apt-get install prometheus)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool(t, "check", "rules", "alerts.yaml")
	// Every alert fires in alerts_test.yaml where it should, with its
	// labels and annotations, and stays quiet where it should not.
	promtool(t, "test", "rules", "alerts_test.yaml")
}

func TestAlertsUseExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r rules
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	names := deploytest.Exported(t)
	alerts := 0
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			alerts++
			used, unknown := deploytest.Check(names, rule.Expr)
			if len(used) == 0 {
				t.Errorf("alert %s queries no splicer metric", rule.Alert)
			}
			for _, m := range unknown {
				t.Errorf("alert %s queries %s, which splicer does not export", rule.Alert, m)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
}

// Tests that the shipped example configurations say what they claim.

package config

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func examplePath(name string) string { return filepath.Join("..", "..", "examples", name) }

func TestExampleTCPParses(t *testing.T) {
	cfg, err := Load(examplePath("tcp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Listener{listenerWith("plug", "10.99.1.1:7000", "10.99.2.2:5201"), listenerWith("web", "10.99.1.1:8080", "10.99.2.2:80")}
	for i := range cfg.Listeners {
		want[i].Line = cfg.Listeners[i].Line
	}
	if !slices.EqualFunc(cfg.Listeners, want, func(a, b Listener) bool {
		return a.Name == b.Name && a.Listen == b.Listen && slices.Equal(a.Upstream, b.Upstream)
	}) {
		t.Errorf("listeners = %+v, want %+v", cfg.Listeners, want)
	}
	if cfg.Admin != "127.0.0.1:9901" {
		t.Errorf("admin = %q", cfg.Admin)
	}
}

// TestExampleSNIParses: sni.yaml sends a.test to 10.99.2.2:9443 and
// b.test to 10.99.2.2:9444 from 10.99.1.1:8443, passing TLS through.
func TestExampleSNIParses(t *testing.T) {
	cfg, err := Load(examplePath("sni.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Listeners[0]
	servers := map[string]string{}
	for _, pl := range l.Pools {
		servers[pl.Name] = pl.Servers[0].Address
	}
	route := map[string]string{}
	for _, r := range l.TLSRoutes {
		if r.ALPN == "" {
			route[r.ServerName] = servers[r.Pool]
		}
	}
	if l.Listen != "10.99.1.1:8443" || l.Proxy != "tcp" || l.Engine != "auto" || !l.RoutesByHello() ||
		route["a.test"] != "10.99.2.2:9443" || route["b.test"] != "10.99.2.2:9444" {
		t.Errorf("listener %s (%s, engine %s) routes %v, want 10.99.1.1:8443 (tcp, auto) sending a.test to 10.99.2.2:9443, b.test to 10.99.2.2:9444", l.Listen, l.Proxy, l.Engine, route)
	}
}

// TestExampleBrokenFails checks that broken.yaml fails with exactly one error
// on each line marked "# ERROR:", and that each message says what the
// comment promises.
func TestExampleBrokenFails(t *testing.T) {
	path := examplePath("broken.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var marked []int
	for i, line := range bytes.Split(data, []byte("\n")) {
		if bytes.Contains(line, []byte("# ERROR:")) {
			marked = append(marked, i+1)
		}
	}
	errs := parseErrors(t, data)
	var got []int
	for _, e := range errs {
		got = append(got, e.Line)
	}
	if !slices.Equal(got, marked) {
		t.Errorf("error lines = %v, want the marked lines %v; errors:\n%v", got, marked, errs)
	}
	for _, phrase := range []string{
		"missing port",
		`unknown value "verbose"`,
		`invalid duration "30": missing unit`,
		`unknown unit "KB"`,
		`did you mean "connect_timeout"?`,
		`duplicate listener name "plug"`,
		"is the same address as 10.99.1.1:7000 of listeners[0]",
		"expected a list",
		`unknown engine "splice"`,
		`missing required key "name"`,
		"expected an integer",
	} {
		if !strings.Contains(errs.Error(), phrase) {
			t.Errorf("no error says %q; errors:\n%v", phrase, errs)
		}
	}
}

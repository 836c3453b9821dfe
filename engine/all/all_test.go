// Tests that the configuration accepts exactly the engines this package builds, and the order a listener's engines are tried in.

package all

import (
	"slices"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
)

func TestConfigKnowsEveryEngine(t *testing.T) {
	want := append([]string{"auto"}, Names()...)
	if !slices.Equal(config.EngineNames, want) {
		t.Fatalf("config.EngineNames = %v, want %v", config.EngineNames, want)
	}
	for _, n := range AutoOrder {
		if !slices.Contains(Names(), n) {
			t.Errorf("AutoOrder names %q, which is no engine", n)
		}
	}
	for _, n := range Names() {
		if !slices.Contains(AutoOrder, n) {
			t.Errorf("engine %q is not in AutoOrder: no listener's chain would try it", n)
		}
	}
}

// named is an engine with only a name, for ordering tests.
type named struct {
	engine.Engine
	name string
}

func (n named) Name() string { return n.name }

// TestChainOrder: auto takes every built engine in AutoOrder; a named
// engine comes first, then the shallower ones in AutoOrder too (so ip
// falls back to pipe before sockmap, as auto does), and an engine that
// was not built is left out.
func TestChainOrder(t *testing.T) {
	s := &Set{Engines: []engine.Engine{named{name: "ip"}, named{name: "sockmap"}, named{name: "pipe"}, named{name: "copy"}}}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"auto", []string{"ip", "pipe", "sockmap", "copy"}},
		{"ip", []string{"ip", "pipe", "sockmap", "copy"}},
		{"sockmap", []string{"sockmap", "pipe", "copy"}},
		{"pipe", []string{"pipe", "copy"}},
		{"copy", []string{"copy"}},
	} {
		chain, err := s.Chain(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := chainNames(chain); !slices.Equal(got, tc.want) {
			t.Errorf("Chain(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	without := &Set{Engines: []engine.Engine{named{name: "sockmap"}, named{name: "pipe"}, named{name: "copy"}}}
	if chain, _ := without.Chain("ip"); !slices.Equal(chainNames(chain), []string{"pipe", "sockmap", "copy"}) {
		t.Errorf("Chain(ip) without ip built = %v, want pipe, sockmap, copy", chainNames(chain))
	}
	if _, err := s.Chain("nosuch"); err == nil {
		t.Error("Chain of an unknown engine did not fail")
	}
}

func chainNames(chain []engine.Engine) []string {
	var n []string
	for _, e := range chain {
		n = append(n, e.Name())
	}
	return n
}

// TestStart: auto starts pairs on copy where ip leads its chain, to be
// promoted to ip; a named engine, or auto without ip, starts on its
// chain's first engine.
func TestStart(t *testing.T) {
	s := &Set{Engines: []engine.Engine{named{name: "ip"}, named{name: "sockmap"}, named{name: "pipe"}, named{name: "copy"}}}
	without := &Set{Engines: []engine.Engine{named{name: "sockmap"}, named{name: "pipe"}, named{name: "copy"}}}
	for _, tc := range []struct {
		set        *Set
		name, want string
	}{
		{s, "auto", "copy"},
		{s, "", "copy"},
		{s, "ip", ""},
		{s, "pipe", ""},
		{without, "auto", ""},
	} {
		chain, err := tc.set.Chain(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if e := tc.set.Start(tc.name, chain); e != nil {
			got = e.Name()
		}
		if got != tc.want {
			t.Errorf("Start(%q) over %v = %q, want %q", tc.name, chainNames(chain), got, tc.want)
		}
	}
}

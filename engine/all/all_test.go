// Tests that the configuration accepts exactly the engines this package builds.

package all

import (
	"slices"
	"testing"

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
}

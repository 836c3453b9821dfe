// The workers key: how many processes serve the listeners, a count or "auto".

package config

import (
	"fmt"
	"runtime"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Workers is the number of worker processes; 0 (left out) is one process
// and no master, WorkersAuto one per CPU.
type Workers int

// WorkersAuto is `workers: auto`.
const WorkersAuto Workers = -1

// MaxWorkers bounds workers: more is almost surely a typo.
const MaxWorkers = 256

// UnmarshalYAML takes a count or "auto".
func (w *Workers) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "auto" {
		*w = WorkersAuto
		return nil
	}
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("must be a count of processes or auto, got %q", n.Value)
	}
	*w = Workers(v)
	return nil
}

// MarshalYAML writes what UnmarshalYAML reads.
func (w Workers) MarshalYAML() (any, error) {
	if w == WorkersAuto {
		return "auto", nil
	}
	return int(w), nil
}

// Count is how many processes serve: at least one.
func (w Workers) Count() int {
	switch {
	case w == WorkersAuto:
		return runtime.NumCPU()
	case w < 1:
		return 1
	}
	return int(w)
}

// Master reports whether `splicer run` starts worker processes rather
// than serving itself.
func (w Workers) Master() bool { return w.Count() > 1 }

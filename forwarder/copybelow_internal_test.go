// copyBelow: how far http-reverse copies bodies itself, given the floors of the listener's engines.

package forwarder

import (
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/httpcore"
)

// floored is an engine with a floor on limited splices (engine.MinLimited),
// as ip has with engines.ip.min_body.
type floored struct {
	engine.Engine
	min int64
}

func (f floored) MinLimit() int64 { return f.min }

func TestCopyBelow(t *testing.T) {
	plain := floored{}.Engine // no floor: engine.MinLimited not implemented
	for _, tc := range []struct {
		name  string
		chain []engine.Engine
		want  int64
	}{
		{"no engine with a floor: http-reverse's default", []engine.Engine{plain}, 0},
		{"ip at the default min_body: the default", []engine.Engine{floored{min: int64(config.DefaultMinBody)}, plain}, 0},
		{"ip from 512 KiB: the default", []engine.Engine{floored{min: 512 << 10}, plain}, 0},
		{"ip from 128 KiB: copied below it", []engine.Engine{floored{min: 128 << 10}, plain}, 128<<10 - 1},
		{"ip for every body: only what every proxy copies", []engine.Engine{floored{min: 0}}, httpcore.DefaultCopyBelow},
		{"the lowest floor wins", []engine.Engine{floored{min: 256 << 10}, floored{min: 64 << 10}}, 64<<10 - 1},
		{"ip from 1 MiB: the default", []engine.Engine{floored{min: 1 << 20}}, 0},
	} {
		if got := copyBelow(tc.chain); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

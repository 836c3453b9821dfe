// Promotion of engine auto's pairs: the promote section, its defaults and its checks.

package config

import (
	"fmt"
	"time"
)

// Promote is when a pair of a listener with engine auto moves from the
// engine it starts on (copy) to ip: once it has moved AfterBytes, both
// ways together, or lived After, whichever comes first. A pair that ends
// before either never touches ip: it pays none of ip's splice, takes no
// entry in its tables. 0 leaves that threshold out; both 0 hand every
// pair to ip at once (as engine ip does). It applies to pairs spliced
// until they close (tcp, socks5, CONNECT and Upgrade tunnels); HTTP
// bodies have engines.ip.min_body. Where ip cannot run, auto's pairs
// start on its first engine (pipe) and stay there.
type Promote struct {
	AfterBytes Size     `yaml:"after_bytes"`
	After      Duration `yaml:"after"`
}

// On reports whether pairs start on the cheap engine at all.
func (p Promote) On() bool { return p.AfterBytes > 0 || p.After > 0 }

// String says when a pair is promoted, for splicer check and logs.
func (p Promote) String() string {
	switch {
	case !p.On():
		return "at once"
	case p.AfterBytes == 0:
		return "after " + p.After.String()
	case p.After == 0:
		return "after " + p.AfterBytes.String()
	}
	return fmt.Sprintf("after %s or %s", p.AfterBytes, p.After)
}

// DefaultPromote weighs what a pair pays on copy per byte against ip's
// splice, as a ski rental does: a pair moves to ip once copying it has
// cost as much as splicing it would, which keeps any pair within twice
// the cost of the best choice made knowing its length. AfterBytes is
// where `splicer bench crossover` (docs/benchmarks.md) finds ip's
// process CPU per connection meeting copy's (crossover_copy_kib): on a
// 2-vCPU VM under load from other work, bbr, 2026-12-07, two runs of 3
// gave 166 KiB (95-305) and 232 KiB (232-249), rounded to 192 KiB, three
// of copy's 64 KiB reads. It moves as ip's splice gets cheaper: rerun the
// bench and set it from there. A pair spliced until it closes is never
// unspliced, so ip's unsplice is not on its bill. After: a short exchange
// through the forwarder lasts well under a millisecond (wrk with
// Connection: close, 1 KiB), and a pair alive 200 ms holds copy's two
// 64 KiB buffers for its whole life where ip holds none.
var DefaultPromote = Promote{AfterBytes: 192 << 10, After: Duration(200 * time.Millisecond)}

// promote checks a listener's promote section: it is for engine auto
// only, and its times are not negative. A section that holds the
// defaults is let pass beside a named engine: the configuration a master
// hands its next binary is written whole, every default included.
func (v *validator) promote(p string, l *Listener) {
	p += ".promote"
	v.notNegative(p+".after", l.Promote.After)
	if l.Engine != "auto" && l.Engine != "" && v.written(p) && l.Promote != DefaultPromote {
		v.errorf(p, "promote is for engine auto, which starts pairs on copy and moves them to ip; engine %s starts every pair on %s", l.Engine, l.Engine)
	}
}

// Package all lists every engine splicer has, deepest first, and builds the ones a host allows.
package all

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/splicer/splicer/engine"
	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/engine/sockmap"
	"github.com/splicer/splicer/internal/config"
)

// Factory builds one engine from the configuration.
type Factory struct {
	Name string
	// New builds the engine; a nil engine with a nil error means the
	// engine is switched off in the configuration.
	New func(cfg config.Engines, log *slog.Logger) (engine.Engine, error)
}

// Ladder is every engine, deepest first: auto tries them in this order.
var Ladder = []Factory{
	{Name: ip.Name, New: func(cfg config.Engines, log *slog.Logger) (engine.Engine, error) {
		if !cfg.IP.Enabled {
			return nil, nil
		}
		pin := cfg.IP.PinDir
		if pin == config.PinDirOff {
			pin = ""
		}
		opts := ip.Options{MaxPairs: cfg.IP.MaxPairs, TimeWait: cfg.IP.TimeWait.Std(), IdleTimeout: cfg.IP.IdleTimeout.Std(), PinDir: pin,
			MinLimit: int64(cfg.IP.MinBody)}
		if lo, hi, on, err := cfg.IP.PortRange(); err != nil {
			return nil, err
		} else if on {
			opts.LocalPorts = ip.PortRange{Low: lo, High: hi}
		}
		return ip.New(opts, log), nil
	}},
	{Name: sockmap.Name, New: func(cfg config.Engines, log *slog.Logger) (engine.Engine, error) {
		if !cfg.Sockmap.Enabled {
			return nil, nil
		}
		return sockmap.New(sockmap.Options{}, log)
	}},
	{Name: pipe.Name, New: func(cfg config.Engines, _ *slog.Logger) (engine.Engine, error) {
		return pipe.New(int(cfg.Pipe.PipeSize)), nil
	}},
	{Name: copyengine.Name, New: func(cfg config.Engines, _ *slog.Logger) (engine.Engine, error) {
		return copyengine.New(int(cfg.Copy.BufferSize)), nil
	}},
}

// AutoOrder is the order auto tries the engines it uses, by what this
// project's benchmark measures on its reference machine (2 vCPUs, Linux
// 6.18; RESULTS.md), not by depth: pipe before sockmap, since pipe moves
// more per CPU in bulk (1 connection 12.6 vs 9.2 Gbit/s, 0.93 vs 1.33 CPU
// s/GB) and serves more HTTP requests at every object size through
// http-reverse (wrk, 1 KiB 12.6k vs 11.6k req/s, 1 MiB 1,051 vs 737); sockmap
// wins only 1-byte request/response (9.1k vs 8.0k txn/s). ip leads once it
// is not opt-in. An engine that declines a pair still falls back down the
// rest of the order.
var AutoOrder = []string{"ip", "pipe", "sockmap", "copy"}

// AutoStart is the engine auto starts a pair on when the first engine of
// AutoOrder it may use is one of PromoteTo: the pair moves there once it
// proves long (a listener's promote thresholds), and a short pair never
// pays that engine's splice. copy, since a short pair costs it less than
// pipe, which takes a pipe from its pool and makes two splice(2) calls a
// chunk where copy makes a read and a write: BenchmarkShortPair (1 KiB
// each way, then close, on loopback; 2 vCPUs shared with other work,
// load 15, 3 runs), process CPU per pair 651-749 µs copy against 716-728
// µs pipe, wall 279-428 µs against 359-424 µs.
const AutoStart = "copy"

// PromoteTo are the engines auto hands pairs to once they prove long,
// rather than starting them there: ip, whose splice installs kernel state
// (55-80 µs here) that a short pair does not win back.
var PromoteTo = []string{"ip"}

// The configuration learns the engine names from here, where the engines are.
func init() { config.RegisterEngines(Names()...) }

// Names returns the engine names, deepest first.
func Names() []string {
	n := make([]string, len(Ladder))
	for i, f := range Ladder {
		n[i] = f.Name
	}
	return n
}

// Unavailable says why an engine cannot run on this host.
type Unavailable struct {
	Name   string
	Reason string
}

// Set is the engines that can run here, deepest first, and the ones that cannot.
type Set struct {
	Engines     []engine.Engine
	Unavailable []Unavailable
}

// Build builds and probes every engine. An engine that is switched off,
// fails to build or fails its probe is listed in Unavailable with the reason.
func Build(cfg config.Engines, log *slog.Logger) *Set {
	s := &Set{}
	for _, f := range Ladder {
		e, err := f.New(cfg, log)
		switch {
		case err != nil:
			s.Unavailable = append(s.Unavailable, Unavailable{f.Name, err.Error()})
			continue
		case e == nil:
			s.Unavailable = append(s.Unavailable, Unavailable{f.Name, "switched off in the configuration"})
			continue
		}
		if err := e.Probe(); err != nil {
			e.Close()
			s.Unavailable = append(s.Unavailable, Unavailable{f.Name, err.Error()})
			continue
		}
		s.Engines = append(s.Engines, e)
	}
	return s
}

// Chain returns the engines a listener configured with name may use, the
// preferred first: for auto all of them in AutoOrder; otherwise the named
// engine, then every shallower one as a fallback, in AutoOrder too (ip
// falls back to pipe before sockmap, as auto does). It errors when name
// is unknown.
func (s *Set) Chain(name string) ([]engine.Engine, error) {
	if name == "" || name == "auto" {
		return s.inAutoOrder(func(string) bool { return true }), nil
	}
	depth := rank(name)
	if depth == len(Ladder) {
		return nil, fmt.Errorf("unknown engine %q", name)
	}
	named := s.inAutoOrder(func(n string) bool { return n == name })
	return append(named, s.inAutoOrder(func(n string) bool { return rank(n) > depth })...), nil
}

// Start returns the engine a pair of a listener whose engine is chain's
// starts on before a promotion to chain[0] (AutoStart), or nil when pairs
// start on chain[0]: name is not auto, chain[0] is not one of PromoteTo,
// or AutoStart cannot run here.
func (s *Set) Start(name string, chain []engine.Engine) engine.Engine {
	if (name != "" && name != "auto") || len(chain) == 0 || !slices.Contains(PromoteTo, chain[0].Name()) {
		return nil
	}
	for _, e := range chain {
		if e.Name() == AutoStart {
			return e
		}
	}
	return nil
}

// inAutoOrder is the built engines whose names keep says, in AutoOrder
// (which names every engine: TestConfigKnowsEveryEngine).
func (s *Set) inAutoOrder(keep func(name string) bool) []engine.Engine {
	var chain []engine.Engine
	for _, n := range AutoOrder {
		for _, e := range s.Engines {
			if e.Name() == n && keep(n) {
				chain = append(chain, e)
			}
		}
	}
	return chain
}

// Reason returns why engine name is unavailable, or "".
func (s *Set) Reason(name string) string {
	for _, u := range s.Unavailable {
		if u.Name == name {
			return u.Reason
		}
	}
	return ""
}

// Close closes every built engine.
func (s *Set) Close() {
	for _, e := range s.Engines {
		e.Close()
	}
}

func rank(name string) int {
	for i, f := range Ladder {
		if f.Name == name {
			return i
		}
	}
	return len(Ladder)
}

// Contract: what each engine declares it does where engines may differ, so that a change in what it supports fails the suite.

package enginetest

import "fmt"

// Contract is what an engine must do where the engines are allowed to
// differ. Every engine must support byte limits and a watched direction
// beside a limited one; the fields are the rest. The suite holds an engine
// to its contract both ways: doing less is a regression, and doing more
// means the contract (and what the forwarder expects of the engine) is
// out of date. Either fails; nothing is skipped.
type Contract struct {
	// WatchBesideFIN: a direction may be watched while the other is
	// forwarded until its FIN, with no limit.
	WatchBesideFIN bool
	// TimerAfterFIN: Options.For ends a splice that already forwarded
	// one direction's FIN, and the pair can be spliced again until the
	// other FIN. Without it the engine keeps such a pair spliced until
	// both FINs.
	TimerAfterFIN bool
}

// contracts is each engine's declaration, by engine name.
var contracts = map[string]Contract{
	"copy":    {WatchBesideFIN: true, TimerAfterFIN: true},
	"pipe":    {WatchBesideFIN: true, TimerAfterFIN: true},
	"sockmap": {WatchBesideFIN: true, TimerAfterFIN: true},
	// TCP_REPAIR rebuilds no half-closed socket: ip cannot give back a
	// pair past one FIN, so it neither ends such a splice at a watch nor
	// at a timer.
	"ip": {},
}

// WithContract holds the engine to c instead of the contract declared for
// its name: for an engine outside this repository, or a variant of one.
func WithContract(c Contract) Option {
	return func(s *suite) { s.contract = &c }
}

// contractOf returns the contract s's engine is held to.
func (s *suite) contractOf() (Contract, error) {
	if s.contract != nil {
		return *s.contract, nil
	}
	c, ok := contracts[s.e.Name()]
	if !ok {
		return Contract{}, fmt.Errorf("engine %q declares no contract: add it to enginetest's contracts or pass WithContract", s.e.Name())
	}
	return c, nil
}

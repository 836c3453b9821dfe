// Package loss drops a chosen random fraction of the packets crossing a
// network interface, with a small tcx BPF program. It stands in for netem's
// loss, which the project's kernels are built without.
//
// The program needs Linux 6.6 or later (tcx) and CAP_BPF plus CAP_NET_ADMIN.
// Counting is per CPU, so reading Stats never slows the data path.
//
//	p, err := loss.New(20) // drop 20%
//	if err != nil { ... }
//	defer p.Close()
//	err = p.Attach(ifindex, ebpf.AttachTCXIngress) // ifindex in the calling thread's netns
package loss

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

//go:generate go run github.com/splicer/splicer/internal/bpf2go -type counter Loss bpf/loss.c

// Stats counts the packets the program has seen since it was loaded.
type Stats struct {
	Passed  uint64 // handed on to the next program or the stack
	Dropped uint64 // dropped by the random draw
}

// Total is the number of packets the program has seen.
func (s Stats) Total() uint64 { return s.Passed + s.Dropped }

// Program is a loaded loss program, attached to at most one interface.
type Program struct {
	objs LossObjects
	link link.Link
}

// New loads a loss program that drops percent (0 to 100) of the packets it
// sees. It is not attached anywhere until Attach.
func New(percent float64) (*Program, error) {
	below, err := dropBelow(percent)
	if err != nil {
		return nil, err
	}
	p := &Program{}
	if err := LoadLossObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load loss program: %w", err)
	}
	if err := p.objs.DropBelow.Set(below); err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("set loss threshold: %w", err)
	}
	return p, nil
}

// dropBelow scales a percentage to the program's 2^32 threshold.
func dropBelow(percent float64) (uint64, error) {
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return 0, fmt.Errorf("loss percent %v is not within 0..100", percent)
	}
	return uint64(math.Round(percent / 100 * (1 << 32))), nil
}

// Attach hooks the program to interface ifindex at attach, which must be
// ebpf.AttachTCXIngress or ebpf.AttachTCXEgress. The index is resolved in the
// network namespace of the calling OS thread. The program goes to the head of
// the interface's tcx chain so that it drops packets before any program
// already there (an engine under test) sees them, as a lossy wire would.
func (p *Program) Attach(ifindex int, attach ebpf.AttachType) error {
	if p.link != nil {
		return errors.New("loss program is already attached")
	}
	if attach != ebpf.AttachTCXIngress && attach != ebpf.AttachTCXEgress {
		return fmt.Errorf("attach type %v is not a tcx hook", attach)
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   p.objs.RandomLoss,
		Attach:    attach,
		Anchor:    link.Head(),
	})
	if err != nil {
		return fmt.Errorf("attach loss program to ifindex %d: %w", ifindex, err)
	}
	p.link = l
	return nil
}

// SetPercent changes the share of packets dropped, effective for the next
// packet; the program stays attached.
func (p *Program) SetPercent(percent float64) error {
	below, err := dropBelow(percent)
	if err != nil {
		return err
	}
	return p.objs.DropBelow.Set(below)
}

// Stats sums the per-CPU counters.
func (p *Program) Stats() (Stats, error) {
	passed, err := p.sum(LossCounterCOUNTER_PASSED)
	if err != nil {
		return Stats{}, err
	}
	dropped, err := p.sum(LossCounterCOUNTER_DROPPED_RANDOM_LOSS)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Passed: passed, Dropped: dropped}, nil
}

func (p *Program) sum(which LossCounter) (uint64, error) {
	var perCPU []uint64
	if err := p.objs.LossCounters.Lookup(uint32(which), &perCPU); err != nil {
		return 0, fmt.Errorf("read loss counter %d: %w", which, err)
	}
	var total uint64
	for _, v := range perCPU {
		total += v
	}
	return total, nil
}

// Close detaches the program and unloads it.
func (p *Program) Close() error {
	var errs []error
	if p.link != nil {
		errs = append(errs, p.link.Close())
		p.link = nil
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

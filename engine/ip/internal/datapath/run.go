// Running the program once on a frame the caller built (BPF_PROG_TEST_RUN), and reading a pair's published offsets: for tests and diagnostics outside this package.

package datapath

import (
	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/engine"
)

// skbHead is the head of struct __sk_buff up to ifindex: the part of a tc
// program's context BPF_PROG_TEST_RUN lets a caller set (the rest is
// zero). The kernel takes ingress_ifindex as the skb's input device
// (skb_iif) and ifindex as the device it is on (skb->dev; loopback if 0).
type skbHead struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
	IngressIfindex, Ifindex                                                               uint32
}

// Run passes frame through the program once, as if it had arrived on
// device ifindex, in the calling thread's network namespace (where the
// pairs' devices must be), and returns the program's verdict (a tc action
// code) and the frame as it left. A spliced flow's frame is translated
// only on the device toward its sender (PairSpec.IfindexA for A's,
// IfindexB for B's).
func (d *Datapath) Run(frame []byte, ifindex int) (int32, []byte, error) {
	opts := &ebpf.RunOptions{
		Data:    frame,
		DataOut: make([]byte, len(frame)+256),
		Context: skbHead{IngressIfindex: uint32(ifindex), Ifindex: uint32(ifindex)},
	}
	ret, err := d.objs.SpliceIngress.Run(opts)
	return int32(ret), opts.DataOut, err
}

// Offsets returns the SeqOff and TSOff that direction dir of the pair
// whose A tuple is a has published.
func (d *Datapath) Offsets(a Tuple, dir engine.Direction) (seqOff, tsOff uint32, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return 0, 0, err
	}
	e := d.entry(p.slot(dir))
	return e.SeqOff, e.TsOff, nil
}

// Running the program once on a frame the caller built (BPF_PROG_TEST_RUN), and reading a pair's published offsets: for tests and diagnostics outside this package.

package datapath

import (
	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/engine"
)

// Run passes frame through the program once, in the calling thread's
// network namespace (where the pairs' devices must be), and returns the
// program's verdict (a tc action code) and the frame as it left.
func (d *Datapath) Run(frame []byte) (int32, []byte, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
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

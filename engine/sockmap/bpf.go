// Loading of the sk_skb programs and maps the sockmap engine shares among all pairs, and the checks that say why they cannot load.

package sockmap

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/splicer/splicer/internal/caps"
)

// Short names for the generated enums of splice.c: the event kinds the
// parser sends through the events ring buffer (enum event_kind) and the
// indexes of the per-CPU counters map (enum counter).
const (
	eventLimit   = uint32(spliceEventKindEVENT_LIMIT)
	eventStopped = uint32(spliceEventKindEVENT_STOPPED)
	eventCredit  = uint32(spliceEventKindEVENT_CREDIT)

	counterRedirectMsgs  = spliceCounterCOUNTER_REDIRECT_MSGS
	counterRedirectBytes = spliceCounterCOUNTER_REDIRECT_BYTES
	counterParserStops   = spliceCounterCOUNTER_PARSER_STOPS
	counterDropNoState   = spliceCounterCOUNTER_DROP_NO_STATE
	counterDropNoPeer    = spliceCounterCOUNTER_DROP_NO_PEER
	counterEventsLost    = spliceCounterCOUNTER_EVENTS_LOST
	counterMax           = spliceCounterCOUNTER_MAX
)

// checkKernel names the kernel feature missing for sockmap splicing.
func checkKernel() error {
	if err := features.HaveMapType(ebpf.SockHash); err != nil {
		return fmt.Errorf("kernel lacks BPF sockhash maps (CONFIG_BPF_STREAM_PARSER): %w", err)
	}
	if err := features.HaveProgramType(ebpf.SkSKB); err != nil {
		return fmt.Errorf("kernel lacks sk_skb programs (CONFIG_BPF_STREAM_PARSER): %w", err)
	}
	return nil
}

// datapath is the loaded programs and maps, shared by every pair.
type datapath struct {
	objs spliceLoaded
}

// spliceLoaded is what loadDatapath takes from the object: the programs and
// maps, not the variables that only make clang emit the ABI types.
type spliceLoaded struct {
	splicePrograms
	spliceMaps
}

func (o *spliceLoaded) Close() error {
	return errors.Join(o.splicePrograms.Close(), o.spliceMaps.Close())
}

// loadDatapath loads the programs with maps sized for maxPairs pairs and
// attaches parser and verdict to rx_socks.
func loadDatapath(maxPairs int) (*datapath, error) {
	if err := caps.RequireBPF("sockmap engine"); err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	_ = rlimit.RemoveMemlock()
	if err := checkKernel(); err != nil {
		return nil, err
	}
	spec, err := loadSplice()
	if err != nil {
		return nil, fmt.Errorf("read sockmap BPF object: %w", err)
	}
	for _, name := range []string{"rx_socks", "tx_socks", "ctls", "flows"} {
		spec.Maps[name].MaxEntries = uint32(maxPairs)
	}
	d := &datapath{}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		return nil, fmt.Errorf("load sockmap BPF programs: %w", err)
	}
	for _, a := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
	}{
		{d.objs.SpliceParser, ebpf.AttachSkSKBStreamParser},
		{d.objs.SpliceVerdict, ebpf.AttachSkSKBStreamVerdict},
	} {
		err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: d.objs.RxSocks.FD(), Program: a.prog, Attach: a.typ})
		if err != nil {
			d.close()
			return nil, fmt.Errorf("attach %v to sockhash: %w", a.typ, err)
		}
	}
	return d, nil
}

// close releases programs and maps; the kernel detaches the programs when
// the map goes away.
func (d *datapath) close() error { return d.objs.Close() }

// counters sums the per-CPU counters.
func (d *datapath) counters() [counterMax]uint64 {
	var out [counterMax]uint64
	for i := range counterMax {
		var per []uint64
		if err := d.objs.Counters.Lookup(uint32(i), &per); err != nil {
			continue
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out
}

// Available loads the programs and closes them at once: nil means the
// sockmap engine can run here; the error names what is missing.
func Available() error {
	d, err := loadDatapath(16)
	if err != nil {
		return err
	}
	return d.close()
}

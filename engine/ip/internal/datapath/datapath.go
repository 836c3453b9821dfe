// Loading, attaching and closing the splice program, and reading its counters.

package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Options configures a Datapath. The zero value is usable.
type Options struct {
	// MaxPairs is how many pairs can be spliced at once (default 16384).
	// The directional table is preallocated: 192 bytes per pair of capacity.
	MaxPairs int
	// TimeWait is how long Sweep keeps a pair after both FINs were
	// acknowledged, to translate retransmitted FINs and last ACKs (2MSL;
	// default 60s, Linux's TIME_WAIT).
	TimeWait time.Duration
	// IdleTimeout makes Sweep remove pairs that forwarded nothing for this
	// long (default 0: never).
	IdleTimeout time.Duration
	// EventBuffer is the ring buffer size in bytes, a power of two and a
	// multiple of the page size (default 256 KiB).
	EventBuffer int
	// KeptBuffer bounds the segments the program keeps for the control
	// plane while a pair changes hands (held while it is spliced, past a
	// boundary while it is unspliced) and the reader has not yet taken:
	// the size of their ring buffer in bytes, a power of two and a multiple
	// of the page size (default 8 MiB). A segment that does not fit is
	// dropped and counted as hold_dropped.
	KeptBuffer int
	// OnTable, if set, is called with a pair's B tuple (the forwarder's
	// connection to the server) when the pair enters the table (Insert,
	// or Adopt for each pair it finds) and when it leaves it (in true,
	// then false), under the datapath's lock: the engine's port allocator
	// keeps the pair's local port busy meanwhile. It must not call the
	// datapath.
	OnTable func(b Tuple, in bool)
	// keptChunk, for tests, lowers the payload bytes per kept record
	// (default and maximum SPLICE_KEPT_CHUNK), so short frames take
	// several records.
	keptChunk int
}

func (o Options) withDefaults() Options {
	if o.MaxPairs <= 0 {
		o.MaxPairs = 16384
	}
	if o.TimeWait <= 0 {
		o.TimeWait = 60 * time.Second
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = 256 << 10
	}
	if o.KeptBuffer <= 0 {
		o.KeptBuffer = 8 << 20
	}
	return o
}

// Datapath owns the loaded program, its maps and its attachments. Its
// methods are safe for concurrent use.
type Datapath struct {
	opts   Options
	objs   spliceLoaded
	dirs   []byte // splice_dirs, mmapped
	events *eventRing
	kept   *keptStore

	mu     sync.Mutex
	closed bool
	links  map[int]link.Link
	index  pairIndex // the pairs, by their A and B keys
	slots  slotAlloc
	// pin is where Pin put the maps and links, or where Adopt found
	// them; "" when not pinned (pin.go).
	pin     string
	meta    *ebpf.Map
	adopted bool // Adopt's: it takes no new pairs
}

var dirSize = int(unsafe.Sizeof(spliceSpliceDir{}))

// spliceLoaded is what Load takes from the object: the program and its
// maps, not the variables that only make clang emit the ABI types.
type spliceLoaded struct {
	splicePrograms
	spliceMaps
}

func (o *spliceLoaded) Close() error {
	return errors.Join(o.splicePrograms.Close(), o.spliceMaps.Close())
}

// Load checks the kernel, loads the program and its maps, and maps the
// directional table into memory. Its errors name a missing privilege or
// kernel feature.
func Load(opts Options) (*Datapath, error) {
	opts = opts.withDefaults()
	if opts.MaxPairs > 1<<30 {
		return nil, fmt.Errorf("engine ip: MaxPairs %d is too large", opts.MaxPairs)
	}
	if eb := opts.EventBuffer; eb&(eb-1) != 0 || eb%os.Getpagesize() != 0 {
		return nil, fmt.Errorf("engine ip: EventBuffer %d is not a power of two multiple of the page size", eb)
	}
	if kb := opts.KeptBuffer; kb&(kb-1) != 0 || kb%os.Getpagesize() != 0 {
		return nil, fmt.Errorf("engine ip: KeptBuffer %d is not a power of two multiple of the page size", kb)
	}
	if err := probe(); err != nil {
		return nil, err
	}
	spec, err := loadSplice()
	if err != nil {
		return nil, fmt.Errorf("engine ip: %w", err)
	}
	spec.Maps[spliceMapSpliceFlows].MaxEntries = uint32(2 * opts.MaxPairs)
	spec.Maps[spliceMapSpliceDirs].MaxEntries = uint32(2 * opts.MaxPairs)
	spec.Maps[spliceMapSpliceEvents].MaxEntries = uint32(opts.EventBuffer)
	spec.Maps[spliceMapSpliceKeptRing].MaxEntries = uint32(opts.KeptBuffer)
	if opts.keptChunk > 0 {
		if err := spec.Variables[spliceVarKeptChunk].Set(uint32(opts.keptChunk)); err != nil {
			return nil, fmt.Errorf("engine ip: %w", err)
		}
	}

	d := newDatapath(opts)
	d.slots.max = uint32(opts.MaxPairs)
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		return nil, explainLoad(err)
	}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

func newDatapath(opts Options) *Datapath {
	return &Datapath{
		opts:  opts,
		links: make(map[int]link.Link),
		index: newPairIndex(),
	}
}

// open maps the directional table of the loaded objects into memory and
// opens the event ring buffer; on error it closes the objects.
func (d *Datapath) open() error {
	size := roundUp(2*d.opts.MaxPairs*dirSize, os.Getpagesize())
	var err error
	d.dirs, err = unix.Mmap(d.objs.SpliceDirs.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		d.objs.Close()
		return fmt.Errorf("engine ip: mmap the directional table (needs Linux 5.5+): %w", err)
	}
	d.events, err = openEventRing(d.objs.SpliceEvents)
	if err != nil {
		unix.Munmap(d.dirs)
		d.objs.Close()
		return fmt.Errorf("engine ip: event ring buffer: %w", err)
	}
	kr, err := ringbuf.NewReader(d.objs.SpliceKeptRing)
	if err != nil {
		d.events.close()
		unix.Munmap(d.dirs)
		d.objs.Close()
		return fmt.Errorf("engine ip: kept ring buffer: %w", err)
	}
	d.kept = newKeptStore(kr)
	go d.kept.run()
	return nil
}

// probe names the first kernel feature the program needs and lacks.
func probe() error {
	checks := []struct {
		what string
		err  func() error
	}{
		{"tc BPF programs", func() error { return features.HaveProgramType(ebpf.SchedCLS) }},
		{"BPF ring buffers (5.8)", func() error { return features.HaveMapType(ebpf.RingBuf) }},
		{"bpf_redirect_neigh (5.10)", func() error { return features.HaveProgramHelper(ebpf.SchedCLS, asm.FnRedirectNeigh) }},
		{"bpf_ktime_get_coarse_ns (5.11)", func() error { return features.HaveProgramHelper(ebpf.SchedCLS, asm.FnKtimeGetCoarseNs) }},
		{"bpf_loop (5.17)", func() error { return features.HaveProgramHelper(ebpf.SchedCLS, asm.FnLoop) }},
	}
	for _, c := range checks {
		err := c.err()
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrNotSupported):
			return fmt.Errorf("engine ip: kernel lacks %s; engine ip needs Linux 6.6+", c.what)
		case errors.Is(err, unix.EPERM):
			return fmt.Errorf("engine ip: probing %s needs CAP_BPF and CAP_NET_ADMIN (or root): %w", c.what, err)
		default:
			return fmt.Errorf("engine ip: probing %s: %w", c.what, err)
		}
	}
	return nil
}

func explainLoad(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("engine ip: loading the BPF datapath needs CAP_BPF and CAP_NET_ADMIN (or root): %w", err)
	case errors.As(err, &ve):
		return fmt.Errorf("engine ip: the kernel verifier rejected the datapath (engine ip needs Linux 6.6+): %+v", ve)
	}
	return fmt.Errorf("engine ip: loading the BPF datapath: %w", err)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// Attach attaches the program at tcx ingress of device ifindex. Attaching a
// device twice is a no-op. Close detaches.
func (d *Datapath) Attach(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if _, ok := d.links[ifindex]; ok {
		return nil
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   d.objs.SpliceIngress,
		Attach:    ebpf.AttachTCXIngress,
	})
	switch {
	case err == nil:
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("engine ip: attach to device %d: tcx needs Linux 6.6+: %w", ifindex, err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("engine ip: attach to device %d needs CAP_NET_ADMIN and CAP_BPF: %w", ifindex, err)
	default:
		return fmt.Errorf("engine ip: attach to device %d: %w", ifindex, err)
	}
	if d.pin != "" {
		if err := l.Pin(linkPin(d.pin, ifindex)); err != nil {
			l.Close()
			return fmt.Errorf("engine ip: pin the attachment to device %d: %w", ifindex, err)
		}
	}
	d.links[ifindex] = l
	return nil
}

// Detach removes the program from device ifindex; detaching a device that
// is not attached is a no-op.
func (d *Datapath) Detach(ifindex int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.links[ifindex]
	if !ok {
		return nil
	}
	delete(d.links, ifindex)
	if d.pin != "" {
		// A pinned link stays attached after Close until its pin goes.
		if err := l.Unpin(); err != nil {
			l.Close()
			return err
		}
	}
	return l.Close()
}

// ErrClosed is returned by a Datapath after Close.
var ErrClosed = errors.New("engine ip: datapath closed")

// Close detaches the program from every device and releases the maps. The
// pairs' entries go with them: packets of still-spliced flows then reach
// the local stack. A pinned datapath's pins and directory are removed
// first.
func (d *Datapath) Close() error { return d.close(true) }

// Leave closes the datapath's descriptors but leaves what Pin pinned (or
// Adopt found) in place: the program stays attached and goes on
// forwarding the pairs in the table, for a later Adopt. Without a pin it
// is Close.
func (d *Datapath) Leave() error { return d.close(false) }

func (d *Datapath) close(unpin bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if unpin && d.pin != "" {
		// The links' pins first: a link detaches once its last pin
		// and descriptor are gone.
		errs = append(errs, removePins(d.pin))
	}
	if d.meta != nil {
		errs = append(errs, d.meta.Close())
	}
	for ifindex, l := range d.links {
		errs = append(errs, l.Close())
		delete(d.links, ifindex)
	}
	errs = append(errs, d.events.close())
	errs = append(errs, d.kept.close())
	errs = append(errs, unix.Munmap(d.dirs))
	d.dirs = nil
	errs = append(errs, d.objs.Close())
	return errors.Join(errs...)
}

// counterNames names the program's counters, indexed by enum splice_counter
// (bpf/splice.h); the same names appear in metrics. TestABI fails when the
// program counts something this table does not name.
var counterNames = [...]string{
	spliceSpliceCounterSPLICE_CNT_FORWARDED:     "forwarded",
	spliceSpliceCounterSPLICE_CNT_EVENT_LOST:    "event_lost",
	spliceSpliceCounterSPLICE_CNT_REOPENED:      "reopened",
	spliceSpliceCounterSPLICE_CNT_KEPT:          "kept",
	spliceSpliceCounterSPLICE_CNT_PASSED:        "passed",
	spliceSpliceCounterSPLICE_DROP_NO_ENTRY:     "no_entry",
	spliceSpliceCounterSPLICE_DROP_FRAGMENT:     "fragment",
	spliceSpliceCounterSPLICE_DROP_MALFORMED:    "malformed",
	spliceSpliceCounterSPLICE_DROP_CLOSED:       "closed",
	spliceSpliceCounterSPLICE_DROP_HOLD:         "hold",
	spliceSpliceCounterSPLICE_DROP_SYN:          "syn_on_spliced",
	spliceSpliceCounterSPLICE_DROP_NO_ACK:       "no_ack",
	spliceSpliceCounterSPLICE_DROP_SEQ:          "seq_out_of_window",
	spliceSpliceCounterSPLICE_DROP_ACK:          "ack_out_of_window",
	spliceSpliceCounterSPLICE_DROP_HOLD_DROPPED: "hold_dropped",
	spliceSpliceCounterSPLICE_DROP_MTU:          "mtu_exceeded",
	spliceSpliceCounterSPLICE_DROP_REWRITE:      "rewrite_failed",
	spliceSpliceCounterSPLICE_DROP_WRONG_DEVICE: "wrong_device",
	spliceSpliceCounterSPLICE_DROP_STALE_FIN:    "stale_fin",
	spliceSpliceCounterSPLICE_DROP_EXT_HDR:      "ipv6_ext_header",
	spliceSpliceCounterSPLICE_DROP_EXT_CHAIN:    "ipv6_ext_chain",
}

// firstDrop is the index of the first drop reason in counterNames.
const firstDrop = int(spliceSpliceCounterSPLICE_DROP_NO_ENTRY)

// DropReasons lists every drop reason Drops can report, in a stable order.
func DropReasons() []string { return append([]string(nil), counterNames[firstDrop:]...) }

// Drops returns how many packets of spliced flows the program dropped, by
// reason, summed over CPUs. Every reason is present, zero or not.
func (d *Datapath) Drops() (map[string]uint64, error) {
	all, err := d.readCounters()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(counterNames)-firstDrop)
	for i := firstDrop; i < len(counterNames); i++ {
		out[counterNames[i]] = all[i]
	}
	return out, nil
}

// Counters returns the counters that are not drops: "forwarded" (packets
// translated and redirected), "event_lost" (events the full ring buffer
// refused), "reopened" (SYNs handed to the stack on the tuple of a pair
// their sender is done with: ended, or both FINs sent and its own acknowledged), "kept" (segments kept for the control plane) and "passed"
// (segments of a released direction handed to the stack).
func (d *Datapath) Counters() (map[string]uint64, error) {
	all, err := d.readCounters()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, firstDrop)
	for i := 0; i < firstDrop; i++ {
		out[counterNames[i]] = all[i]
	}
	return out, nil
}

func (d *Datapath) readCounters() ([]uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	sums := make([]uint64, len(counterNames))
	for i := range counterNames {
		var perCPU []uint64
		if err := d.objs.SpliceCounters.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("engine ip: read counter %s: %w", counterNames[i], err)
		}
		for _, v := range perCPU {
			sums[i] += v
		}
	}
	return sums, nil
}

// Pinning: the maps and tcx links of a datapath in a BPF file system, so that its program goes on forwarding its pairs after the process ends, and adopting a datapath another process pinned.

package datapath

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/splicer/splicer/engine"
)

// The pins in a datapath's directory. The maps are the program's; meta is
// the datapath's own (the program never reads it).
const (
	pinMeta       = "meta"
	pinFlows      = "flows"
	pinDirs       = "dirs"
	pinCounters   = "counters"
	pinEvents     = "events"
	pinLinkPrefix = "link-" // + the device's index
)

func linkPin(dir string, ifindex int) string {
	return filepath.Join(dir, pinLinkPrefix+strconv.Itoa(ifindex))
}

// abiVersion is part of Layout: raise it for a change the layout hash
// cannot see, such as a new meaning for an existing field or flag.
const abiVersion = 3 // 2: held segments kept (splice_kept, the kept ring), not dropped; 3: the window guard (wnd_edge) and the device check

// metaMagic opens the meta record ("SPLC").
const metaMagic = 0x53504c43

// meta is the record pinned beside the maps: what Adopt checks before it
// touches anything. 32 bytes, host order.
type meta struct {
	Magic, Version uint32
	// Layout is Layout() of the binary that pinned the datapath.
	Layout uint64
	// Netns is the inode of the network namespace of its devices.
	Netns    uint64
	PID      uint32
	MaxPairs uint32
}

const metaSize = int(unsafe.Sizeof(meta{}))

// Layout is a fingerprint of the ABI between the program and the tables
// it works on: the map types, key and value sizes and flags, the layout
// of every struct the program and the control plane share (splice.h), the
// values of its enums (modes, flags, counters, events), and abiVersion. A
// datapath pinned by a binary with another Layout cannot be adopted.
func Layout() (uint64, error) { return layout() }

var layout = sync.OnceValues(func() (uint64, error) {
	spec, err := loadSplice()
	if err != nil {
		return 0, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "abi %d\n", abiVersion)
	for _, name := range []string{spliceMapSpliceFlows, spliceMapSpliceDirs, spliceMapSpliceCounters, spliceMapSpliceEvents, spliceMapSpliceKeptRing} {
		m := spec.Maps[name]
		fmt.Fprintf(h, "map %s %v %d %d %#x\n", name, m.Type, m.KeySize, m.ValueSize, m.Flags)
		if name == spliceMapSpliceCounters {
			fmt.Fprintf(h, "entries %d\n", m.MaxEntries) // one per counter
		}
	}
	for _, name := range []string{"splice_key", "splice_dir", "splice_event", "splice_kept"} {
		var s *btf.Struct
		if err := spec.Types.TypeByName(name, &s); err != nil {
			return 0, fmt.Errorf("layout of struct %s: %w", name, err)
		}
		if err := hashStruct(h, s); err != nil {
			return 0, err
		}
	}
	for _, name := range []string{"splice_family", "splice_mode", "splice_opt", "splice_flag", "splice_ctl_layout",
		"splice_time", "splice_event_kind", "splice_counter", "splice_tcp_flag"} {
		var e *btf.Enum
		if err := spec.Types.TypeByName(name, &e); err != nil {
			return 0, fmt.Errorf("layout of enum %s: %w", name, err)
		}
		fmt.Fprintf(h, "enum %s\n", name)
		for _, v := range e.Values {
			fmt.Fprintf(h, "  %s = %d\n", v.Name, v.Value)
		}
	}
	return binary.LittleEndian.Uint64(h.Sum(nil)), nil
})

func hashStruct(w io.Writer, s *btf.Struct) error {
	fmt.Fprintf(w, "struct %s %d\n", s.Name, s.Size)
	for _, m := range s.Members {
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			return fmt.Errorf("layout of %s.%s: %w", s.Name, m.Name, err)
		}
		fmt.Fprintf(w, "  %s @%d:%d %d\n", m.Name, m.Offset, m.BitfieldSize, size)
		if inner, ok := btf.UnderlyingType(m.Type).(*btf.Struct); ok {
			if err := hashStruct(w, inner); err != nil {
				return err
			}
		}
	}
	return nil
}

// IncompatibleError says why a pinned datapath cannot be adopted. What is
// pinned stays as it is: its program goes on forwarding its pairs.
type IncompatibleError struct {
	Dir    string
	Reason string
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("engine ip: the datapath pinned in %s cannot be adopted: %s", e.Dir, e.Reason)
}

// ErrIncomplete is returned by Adopt for a directory without the meta
// record Pin writes last: its process ended while pinning, before any pair
// could be inserted.
var ErrIncomplete = errors.New("engine ip: the pinned datapath is incomplete")

// Pin pins the datapath's maps, its links and those Attach makes later in
// dir, an existing directory in a BPF file system, and writes the meta
// record Adopt checks (last, so a directory without it is incomplete).
// netns is the inode of the network namespace of the devices it attaches
// to. From then on Leave keeps the program forwarding the pairs after the
// process, and Close removes the pins.
func (d *Datapath) Pin(dir string, netns uint64) error {
	lay, err := Layout()
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.pin != "" {
		return fmt.Errorf("engine ip: already pinned in %s", d.pin)
	}
	fail := func(err error) error {
		removePins(dir)
		return fmt.Errorf("engine ip: pin the datapath in %s: %w", dir, err)
	}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{pinFlows, d.objs.SpliceFlows}, {pinDirs, d.objs.SpliceDirs}, {pinCounters, d.objs.SpliceCounters}, {pinEvents, d.objs.SpliceEvents}} {
		if err := m.m.Pin(filepath.Join(dir, m.name)); err != nil {
			return fail(err)
		}
	}
	for ifindex, l := range d.links {
		if err := l.Pin(linkPin(dir, ifindex)); err != nil {
			return fail(err)
		}
	}
	mm, err := ebpf.NewMap(&ebpf.MapSpec{Name: "splice_meta", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(metaSize), MaxEntries: 1})
	if err != nil {
		return fail(err)
	}
	rec := meta{Magic: metaMagic, Version: abiVersion, Layout: lay, Netns: netns, PID: uint32(os.Getpid()), MaxPairs: uint32(d.opts.MaxPairs)}
	if err := mm.Put(uint32(0), rec); err != nil {
		mm.Close()
		return fail(err)
	}
	if err := mm.Pin(filepath.Join(dir, pinMeta)); err != nil {
		mm.Close()
		return fail(err)
	}
	d.meta, d.pin = mm, dir
	return nil
}

// Pinned returns the directory the datapath is pinned in, or "".
func (d *Datapath) Pinned() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pin
}

// removePins removes the pins Pin makes in dir, links first, and dir itself
// once empty. A link detaches when its pin and its last descriptor are gone.
func removePins(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), pinLinkPrefix) {
			errs = append(errs, os.Remove(filepath.Join(dir, e.Name())))
		}
	}
	for _, name := range []string{pinMeta, pinFlows, pinDirs, pinCounters, pinEvents} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Adoption is what Adopt found.
type Adoption struct {
	// PID is the process that pinned the datapath.
	PID int
	// Links is how many device attachments were pinned; Replaced how many
	// of them ran another program, which Adopt replaced with this binary's.
	Links, Replaced int
}

// Adopt takes over the datapath pinned in dir by another process (which
// must be gone, or have left it: the caller makes sure no one else uses
// it). The maps are reused as they are, with the pairs in them; the
// program is loaded again against them and, where a pinned link runs a
// different program (another build of the same layout), replaces it in
// place, so no packet meets a device without a program. An adopted
// datapath follows, sweeps and deletes the pairs it found, but inserts
// none. It returns an *IncompatibleError, and touches nothing, when the
// layout or network namespace differs, and ErrIncomplete when dir holds
// no meta record.
func Adopt(dir string, opts Options, netns uint64) (*Datapath, Adoption, error) {
	var ad Adoption
	lay, err := Layout()
	if err != nil {
		return nil, ad, err
	}
	incompatible := func(format string, args ...any) (*Datapath, Adoption, error) {
		return nil, ad, &IncompatibleError{Dir: dir, Reason: fmt.Sprintf(format, args...)}
	}
	mm, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMeta), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ad, ErrIncomplete
	}
	if err != nil {
		return incompatible("meta record: %v", err)
	}
	closeMeta := true
	defer func() {
		if closeMeta {
			mm.Close()
		}
	}()
	if mm.ValueSize() != uint32(metaSize) {
		return incompatible("meta record of %d bytes, this binary's is %d", mm.ValueSize(), metaSize)
	}
	var rec meta
	if err := mm.Lookup(uint32(0), &rec); err != nil {
		return incompatible("meta record: %v", err)
	}
	ad.PID = int(rec.PID)
	switch {
	case rec.Magic != metaMagic:
		return incompatible("no splicer meta record")
	case rec.Layout != lay:
		return incompatible("its layout %016x (ABI version %d, pid %d) differs from this binary's %016x (ABI version %d)", rec.Layout, rec.Version, rec.PID, lay, abiVersion)
	case rec.Netns != netns:
		return incompatible("it was pinned in another network namespace (inode %d, this one is %d)", rec.Netns, netns)
	}

	pinned := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range pinned {
			m.Close() // Adopt's objects hold clones
		}
	}()
	for _, p := range []struct{ pin, name string }{
		{pinFlows, spliceMapSpliceFlows}, {pinDirs, spliceMapSpliceDirs}, {pinCounters, spliceMapSpliceCounters}, {pinEvents, spliceMapSpliceEvents},
	} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, p.pin), nil)
		if err != nil {
			return incompatible("map %s: %v", p.pin, err)
		}
		pinned[p.name] = m
	}
	spec, err := loadSplice()
	if err != nil {
		return nil, ad, fmt.Errorf("engine ip: %w", err)
	}
	for _, name := range []string{spliceMapSpliceFlows, spliceMapSpliceDirs, spliceMapSpliceEvents} {
		spec.Maps[name].MaxEntries = pinned[name].MaxEntries()
	}
	opts.MaxPairs = int(pinned[spliceMapSpliceDirs].MaxEntries() / 2)
	opts.EventBuffer = int(pinned[spliceMapSpliceEvents].MaxEntries())
	opts = opts.withDefaults()
	d := newDatapath(opts)
	d.adopted = true // slots.max stays 0: Insert finds the table full
	if err := spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return incompatible("%v", err)
		}
		return nil, ad, explainLoad(err)
	}
	if err := d.open(); err != nil {
		return nil, ad, err
	}
	if err := d.restorePairs(); err != nil {
		d.close(false)
		return nil, ad, err
	}
	if ad.Links, ad.Replaced, err = d.adoptLinks(dir); err != nil {
		d.close(false)
		return nil, ad, err
	}
	closeMeta = false
	d.meta, d.pin = mm, dir
	return d, ad, nil
}

// adoptLinks loads the links pinned in dir and makes each run this
// datapath's program.
func (d *Datapath) adoptLinks(dir string) (links, replaced int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	info, err := d.objs.SpliceIngress.Info()
	if err != nil {
		return 0, 0, fmt.Errorf("engine ip: program info: %w", err)
	}
	for _, e := range ents {
		idx, ok := strings.CutPrefix(e.Name(), pinLinkPrefix)
		if !ok {
			continue
		}
		ifindex, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			return links, replaced, fmt.Errorf("engine ip: pinned link %s: %w", e.Name(), err)
		}
		d.links[ifindex] = l
		links++
		if same, err := runsTag(l, info.Tag); err != nil || !same {
			if err := l.Update(d.objs.SpliceIngress); err != nil {
				return links, replaced, fmt.Errorf("engine ip: replace the program on device %d: %w", ifindex, err)
			}
			replaced++
		}
	}
	return links, replaced, nil
}

// runsTag reports whether link l runs a program with this tag (the hash of
// its instructions, map references left out).
func runsTag(l link.Link, tag string) (bool, error) {
	li, err := l.Info()
	if err != nil {
		return false, err
	}
	p, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		return false, err
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		return false, err
	}
	return pi.Tag == tag, nil
}

// restorePairs rebuilds the control plane's record of every pair in the
// table from the flow map (which slots are in use, and the address
// family) and the directional entries (everything else).
func (d *Datapath) restorePairs() error {
	var k spliceSpliceKey
	var s uint32
	keys := map[uint32][2]*spliceSpliceKey{}
	it := d.objs.SpliceFlows.Iterate()
	for it.Next(&k, &s) {
		if s >= uint32(2*d.opts.MaxPairs) {
			continue // points past the table: the program drops it as no_entry
		}
		kk := k
		ks := keys[s/2]
		ks[s&1] = &kk
		keys[s/2] = ks
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("engine ip: read the pinned flows: %w", err)
	}
	var errs []error
	for n, ks := range keys {
		fam := afInet
		for _, k := range ks {
			if k != nil {
				fam = k.Family
			}
		}
		up, down := d.entry(2*n), d.entry(2*n+1)
		spec := PairSpec{
			A: outTuple(down, fam).Reverse(), B: outTuple(up, fam).Reverse(),
			IfindexA: int(atomic.LoadUint32(&down.OutIfindex)), IfindexB: int(atomic.LoadUint32(&up.OutIfindex)),
			Up: dirSpecOf(up), Down: dirSpecOf(down),
		}
		_, p, err := newPair(spec)
		if err == nil && ((ks[0] != nil && *ks[0] != p.ka) || (ks[1] != nil && *ks[1] != p.kb)) {
			err = fmt.Errorf("engine ip: pinned pair %d: its flows and entries disagree", n)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.n = n
		d.index.add(p)
		d.onTable(p, true)
	}
	if len(errs) > 0 {
		return fmt.Errorf("engine ip: %d pinned pairs cannot be read back: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// outTuple is the tuple an entry rewrites packets into.
func outTuple(e *spliceSpliceDir, family uint8) Tuple {
	return tupleFromKey(spliceSpliceKey{Saddr: e.OutSaddr, Daddr: e.OutDaddr, Sport: e.OutSport, Dport: e.OutDport, Family: family})
}

// dirSpecOf reads an entry back as the spec it was published with, its
// tracked state as of now.
func dirSpecOf(e *spliceSpliceDir) DirSpec {
	ctl := atomic.LoadUint32(&e.Ctl)
	opts := (ctl >> ctlOptsPos) & ctlMask
	return DirSpec{
		SeqOff:    atomic.LoadUint32(&e.SeqOff),
		TSOff:     atomic.LoadUint32(&e.TsOff),
		InShift:   uint8((ctl >> ctlInShiftPos) & ctlMask),
		OutShift:  uint8((ctl >> ctlOutShiftPos) & ctlMask),
		StripTS:   opts&optStripTS != 0,
		StripSACK: opts&optStripSACK != 0,
		SndNxt:    atomic.LoadUint32(&e.SndNxt),
		AckHi:     atomic.LoadUint32(&e.AckHi),
		TSLast:    atomic.LoadUint32(&e.TsLast),
		DirMode: DirMode{
			Mode:     engine.Mode(ctl & ctlMask),
			Limited:  opts&optLimit != 0,
			LimitSeq: atomic.LoadUint32(&e.LimitSeq),
		},
	}
}

// PinnedFlows returns the 4-tuples of the flows of the datapath pinned
// in dir, read without adopting it (its process may still run, as the
// old process of an upgrade does): another engine's pairs, whose local
// ports the caller keeps out of its own connections. A layout whose key
// differs from this build's is an error.
func PinnedFlows(dir string) ([]Tuple, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinFlows), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var k spliceSpliceKey
	var slot uint32
	var out []Tuple
	it := m.Iterate()
	for it.Next(&k, &slot) {
		out = append(out, tupleFromKey(k))
	}
	return out, it.Err()
}

// Spec returns the spec of pair a as its entries hold it: the
// translation it was published with (or last updated to), and the
// tracked starting points (SndNxt, AckHi, TSLast) as the program has
// moved them since. FINSeen is not kept.
func (d *Datapath) Spec(a Tuple) (PairSpec, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.lookup(a)
	if err != nil {
		return PairSpec{}, err
	}
	return d.spec(p), nil
}

// spec reads p's spec back from its entries, as Spec returns it.
func (d *Datapath) spec(p *pair) PairSpec {
	up, down := d.entry(p.slot(engine.Up)), d.entry(p.slot(engine.Down))
	return PairSpec{
		A: p.a(), B: p.b(),
		IfindexA: int(atomic.LoadUint32(&down.OutIfindex)), IfindexB: int(atomic.LoadUint32(&up.OutIfindex)),
		Up: dirSpecOf(up), Down: dirSpecOf(down),
		Keep: (atomic.LoadUint32(&up.Flags)|atomic.LoadUint32(&down.Flags))&flagKeep != 0,
	}
}

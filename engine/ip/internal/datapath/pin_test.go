// Pinning and adopting: a datapath pinned, left and adopted keeps its pairs, links and counters; a changed program is replaced in its links; an incompatible or incomplete directory is refused; Close removes every pin and detaches.

package datapath

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// tcxCount is how many programs run at tcx ingress of ifindex in ns.
func tcxCount(tb testing.TB, ns *testNS, ifindex int) int {
	tb.Helper()
	var res *link.QueryResult
	var err error
	ns.do(func() {
		res, err = link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXIngress})
	})
	if err != nil {
		tb.Fatalf("query tcx programs: %v", err)
	}
	return len(res.Programs)
}

func TestLayout(t *testing.T) {
	a, err := Layout()
	if err != nil || a == 0 {
		t.Fatalf("Layout() = %x, %v", a, err)
	}
	if b, _ := Layout(); a != b {
		t.Errorf("Layout() changed: %x then %x", a, b)
	}
}

// TestPinLeaveAdopt pins a datapath with two pairs attached to two
// devices, leaves it (the process's descriptors closed, as a SIGKILL
// would) and adopts it: the pairs, their specs and counters come back, the
// program keeps translating, and a link whose program was swapped for
// another gets this one back. Close then removes every pin and detaches.
func TestPinLeaveAdopt(t *testing.T) {
	fs := testenv.MountBPFFS(t)
	h := newHarness(t, Options{MaxPairs: 64})
	const netns = 4242
	h.ns.do(func() {
		for _, i := range []int{h.ns.ifA, h.ns.ifB} {
			if err := h.dp.Attach(i); err != nil {
				t.Fatalf("Attach: %v", err)
			}
		}
	})
	spec4, spec6 := h.baseSpec(topo4), h.baseSpec(topo6.withPort(41000))
	spec6.Up.StripTS, spec6.Down.InShift = true, 3
	h.insert(spec4)
	h.insert(spec6)
	h.send(topo4.up(packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK, Payload: payload}), verdictRedirect)

	dir := filepath.Join(fs, "gen")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := h.dp.Pin(dir, netns); err != nil {
		t.Fatalf("Pin: %v", err)
	}
	for _, name := range []string{pinMeta, pinFlows, pinDirs, pinCounters, pinEvents, pinLinkPrefix + strconv.Itoa(h.ns.ifA), pinLinkPrefix + strconv.Itoa(h.ns.ifB)} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("pin %s: %v", name, err)
		}
	}
	before := map[Tuple]PairStats{}
	for _, a := range []Tuple{spec4.A, spec6.A} {
		st := h.stats(a)
		st.Up.LastSeen, st.Down.LastSeen = 0, 0
		before[a] = st
	}
	fwd := mustCounters(t, h.dp)["forwarded"]
	if err := h.dp.Leave(); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if n := tcxCount(t, h.ns, h.ns.ifA); n != 1 {
		t.Fatalf("after Leave, %d programs at tcx ingress of device A, want the pinned one", n)
	}

	var ie *IncompatibleError
	if _, _, err := Adopt(dir, Options{}, netns+1); !errors.As(err, &ie) || !strings.Contains(err.Error(), "network namespace") {
		t.Fatalf("Adopt from another namespace: %v, want an IncompatibleError", err)
	}
	ad, info, err := Adopt(dir, Options{}, netns)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if info.Links != 2 || info.Replaced != 0 || info.PID != os.Getpid() {
		t.Errorf("adoption %+v, want 2 links, none replaced, pid %d", info, os.Getpid())
	}
	if got := len(ad.Pairs()); got != 2 {
		t.Fatalf("adopted %d pairs, want 2", got)
	}
	for _, want := range []PairSpec{spec4, spec6} {
		got, err := ad.Spec(want.A)
		if err != nil {
			t.Fatalf("Spec(%v): %v", want.A, err)
		}
		// The tracked starting points are read back as they are now.
		for _, d := range []*DirSpec{&got.Up, &got.Down, &want.Up, &want.Down} {
			d.SndNxt, d.AckHi, d.TSLast = 0, 0, 0
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("adopted spec\n%+v\nwant\n%+v", got, want)
		}
		st, err := ad.Lookup(want.A)
		// LastSeen is an age taken from Now, to the millisecond.
		st.Up.LastSeen, st.Down.LastSeen = 0, 0
		if err != nil || !reflect.DeepEqual(st, before[want.A]) {
			t.Errorf("adopted stats %+v (%v), want %+v", st, err, before[want.A])
		}
	}
	if got := mustCounters(t, ad)["forwarded"]; got != fwd {
		t.Errorf("adopted counter forwarded = %d, want %d", got, fwd)
	}
	if err := ad.Insert(h.baseSpec(topo4.withPort(42000))); err == nil {
		t.Errorf("Insert into an adopted datapath succeeded")
	}
	h2 := &harness{tb: t, dp: ad, ns: h.ns}
	h2.send(topo4.up(packet.Seg{Seq: upNxt + uint32(len(payload)), Ack: upAcked, Flags: packet.ACK, Payload: payload}), verdictRedirect)
	if st := h2.stats(spec4.A); st.Up.Bytes != 2*uint64(len(payload)) {
		t.Errorf("adopted pair forwarded %d bytes in all, want %d", st.Up.Bytes, 2*len(payload))
	}

	// Another program in one link (as a different build would leave):
	// the next adoption puts this binary's back.
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := ad.links[h.ns.ifA].Update(other); err != nil {
		t.Fatalf("swap the program: %v", err)
	}
	if err := ad.Leave(); err != nil {
		t.Fatal(err)
	}
	ad, info, err = Adopt(dir, Options{}, netns)
	if err != nil {
		t.Fatalf("second Adopt: %v", err)
	}
	if info.Replaced != 1 {
		t.Errorf("second adoption replaced %d programs, want 1", info.Replaced)
	}
	pi, _ := ad.objs.SpliceIngress.Info()
	for ifindex, l := range ad.links {
		if same, err := runsTag(l, pi.Tag); err != nil || !same {
			t.Errorf("device %d runs another program after adoption (%v)", ifindex, err)
		}
	}

	if err := ad.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close the directory is still there: %v", err)
	}
	for _, i := range []int{h.ns.ifA, h.ns.ifB} {
		if n := tcxCount(t, h.ns, i); n != 0 {
			t.Errorf("after Close, %d programs at tcx ingress of device %d", n, i)
		}
	}
}

// TestAdoptRefuses: a directory without the meta record is incomplete; one
// pinned by a binary of another layout is left as it is.
func TestAdoptRefuses(t *testing.T) {
	fs := testenv.MountBPFFS(t)
	empty := filepath.Join(fs, "empty")
	os.Mkdir(empty, 0o700)
	if _, _, err := Adopt(empty, Options{}, 1); !errors.Is(err, ErrIncomplete) {
		t.Errorf("Adopt of an empty directory: %v, want ErrIncomplete", err)
	}

	dp, err := Load(Options{MaxPairs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	dir := filepath.Join(fs, "old")
	os.Mkdir(dir, 0o700)
	if err := dp.Pin(dir, 1); err != nil {
		t.Fatal(err)
	}
	var rec meta
	if err := dp.meta.Lookup(uint32(0), &rec); err != nil {
		t.Fatal(err)
	}
	rec.Layout ^= 1
	if err := dp.meta.Put(uint32(0), rec); err != nil {
		t.Fatal(err)
	}
	var ie *IncompatibleError
	if _, _, err := Adopt(dir, Options{}, 1); !errors.As(err, &ie) || !strings.Contains(err.Error(), "layout") {
		t.Fatalf("Adopt of another layout: %v, want an IncompatibleError naming the layout", err)
	}
	if _, err := os.Stat(filepath.Join(dir, pinFlows)); err != nil {
		t.Errorf("a refused adoption touched the pins: %v", err)
	}
}

func mustCounters(tb testing.TB, d *Datapath) map[string]uint64 {
	tb.Helper()
	c, err := d.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

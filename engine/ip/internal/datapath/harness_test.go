// Test helpers: a throwaway network namespace with the lab's two forwarder devices, a loaded datapath, Program.Run inside that namespace on a chosen device, and the program and the reference run side by side.

package datapath

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// topo holds the lab's addresses: client C <-> forwarder F (link A) and F
// <-> server S (link B).
type topo struct {
	client, fa, fb, server netip.AddrPort
}

var (
	topo4 = topo{
		client: netip.MustParseAddrPort("10.99.1.2:40000"),
		fa:     netip.MustParseAddrPort("10.99.1.1:7000"),
		fb:     netip.MustParseAddrPort("10.99.2.1:50000"),
		server: netip.MustParseAddrPort("10.99.2.2:8080"),
	}
	topo6 = topo{
		client: netip.MustParseAddrPort("[fd00:99:1::2]:40000"),
		fa:     netip.MustParseAddrPort("[fd00:99:1::1]:7000"),
		fb:     netip.MustParseAddrPort("[fd00:99:2::1]:50000"),
		server: netip.MustParseAddrPort("[fd00:99:2::2]:8080"),
	}
)

func (t topo) a() Tuple { return Tuple{Src: t.client, Dst: t.fa} }
func (t topo) b() Tuple { return Tuple{Src: t.server, Dst: t.fb} }

// Segments on the four legs: client -> F, F -> server, server -> F, F -> client.
func (t topo) up(s packet.Seg) packet.Seg      { s.Src, s.Dst = t.client, t.fa; return s }
func (t topo) upOut(s packet.Seg) packet.Seg   { s.Src, s.Dst = t.fb, t.server; return s }
func (t topo) down(s packet.Seg) packet.Seg    { s.Src, s.Dst = t.server, t.fb; return s }
func (t topo) downOut(s packet.Seg) packet.Seg { s.Src, s.Dst = t.fa, t.client; return s }

// withPort returns t with the client's port and the forwarder's port
// toward the server changed, for another pair.
func (t topo) withPort(port uint16) topo {
	t.client = netip.AddrPortFrom(t.client.Addr(), port)
	t.fb = netip.AddrPortFrom(t.fb.Addr(), port+10000)
	return t
}

// testNS is a network namespace owned by one locked OS thread; sockets,
// netlink calls and Program.Run that must see it run on that thread
// through do.
type testNS struct {
	calls    chan func()
	finished chan struct{}
	handle   netns.NsHandle
	ifA, ifB int // the harness devices, for newTestNS
}

// newTestNS returns a namespace with the harness devices (setupDevices).
func newTestNS(tb testing.TB) *testNS {
	tb.Helper()
	return newNS(tb, func(ns *testNS) (err error) {
		ns.ifA, ns.ifB, err = setupDevices()
		return err
	})
}

// newNS returns a fresh namespace with lo up, after running setup in it.
func newNS(tb testing.TB, setup func(*testNS) error) *testNS {
	tb.Helper()
	testenv.RequireRoot(tb)
	ns := &testNS{calls: make(chan func()), finished: make(chan struct{})}
	ready := make(chan error)
	go func() {
		// The thread is never unlocked: it exits with this goroutine and
		// takes the namespace with it, whatever happens.
		runtime.LockOSThread()
		defer close(ns.finished)
		h, err := netns.New()
		if err != nil {
			ready <- err
			return
		}
		defer h.Close()
		ns.handle = h
		err = linkUp("lo")
		if err == nil && setup != nil {
			err = setup(ns)
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range ns.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("test namespace: %v", err)
	}
	tb.Cleanup(func() {
		close(ns.calls)
		<-ns.finished
	})
	return ns
}

func linkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// do runs f on the namespace's thread and waits for it.
func (ns *testNS) do(f func()) {
	done := make(chan struct{})
	ns.calls <- func() { defer close(done); f() }
	<-done
}

// setupDevices creates devices for link A and link B with the forwarder's
// addresses, so route lookups toward client and server succeed. They are
// veth pairs whose far ends stay in the namespace: this kernel has no dummy
// driver.
func setupDevices() (ifA, ifB int, err error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return 0, 0, err
	}
	defer nl.Close()
	idx := make([]int, 2)
	for i, c := range []struct {
		name   string
		v4, v6 string
	}{{"spa", "10.99.1.1/24", "fd00:99:1::1/64"}, {"spb", "10.99.2.1/24", "fd00:99:2::1/64"}} {
		d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: c.name, MTU: 1500}, PeerName: c.name + "-far"}
		if err := nl.LinkAdd(d); err != nil {
			return 0, 0, err
		}
		far, err := nl.LinkByName(c.name + "-far")
		if err != nil {
			return 0, 0, err
		}
		if err := nl.LinkSetUp(far); err != nil {
			return 0, 0, err
		}
		l, err := nl.LinkByName(c.name)
		if err != nil {
			return 0, 0, err
		}
		for _, a := range []string{c.v4, c.v6} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return 0, 0, err
			}
			addr.Flags = unix.IFA_F_NODAD
			if err := nl.AddrAdd(l, addr); err != nil {
				return 0, 0, err
			}
		}
		if err := nl.LinkSetUp(l); err != nil {
			return 0, 0, err
		}
		idx[i] = l.Attrs().Index
	}
	return idx[0], idx[1], nil
}

// harness is a loaded datapath and a namespace to run its program in.
type harness struct {
	tb testing.TB
	dp *Datapath
	ns *testNS
}

func newHarness(tb testing.TB, opts Options) *harness {
	tb.Helper()
	ns := newTestNS(tb)
	dp, err := Load(opts)
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	tb.Cleanup(func() {
		if err := dp.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return &harness{tb: tb, dp: dp, ns: ns}
}

// run passes one frame through the real program, arriving on the device
// toward its source (deviceOf).
func (h *harness) run(frame []byte) (int32, []byte) {
	h.tb.Helper()
	return h.runOn(frame, h.deviceOf(frame))
}

// runOn passes one frame through the real program as if it had arrived on
// device ifindex.
func (h *harness) runOn(frame []byte, ifindex int) (int32, []byte) {
	h.tb.Helper()
	var ret int32
	var out []byte
	var err error
	h.ns.do(func() { ret, out, err = h.dp.Run(frame, ifindex) })
	if err != nil {
		h.tb.Fatalf("Program.Run: %v", err)
	}
	return ret, out
}

// The lab's links: the client's (device A) and the server's (device B).
var (
	linkA = []netip.Prefix{netip.MustParsePrefix("10.99.1.0/24"), netip.MustParsePrefix("fd00:99:1::/64")}
	linkB = []netip.Prefix{netip.MustParsePrefix("10.99.2.0/24"), netip.MustParsePrefix("fd00:99:2::/64")}
)

// deviceOf is the device a frame arrives on: the one toward its source
// address, as routing would have it; device A for a frame whose source
// is on neither link or cannot be read.
func (h *harness) deviceOf(frame []byte) int {
	if src, ok := sourceOf(frame); ok && inLink(src, linkB) {
		return h.ns.ifB
	}
	return h.ns.ifA
}

// otherDevice is the harness device a frame from ifindex's side does not
// come in on.
func (h *harness) otherDevice(ifindex int) int {
	if ifindex == h.ns.ifA {
		return h.ns.ifB
	}
	return h.ns.ifA
}

// sourceOf reads the source address of an IPv4 or IPv6 frame.
func sourceOf(frame []byte) (netip.Addr, bool) {
	const eth = packet.EthLen
	switch {
	case len(frame) >= eth+20 && frame[eth]>>4 == 4:
		return netip.AddrFrom4([4]byte(frame[eth+12:])), true
	case len(frame) >= eth+40 && frame[eth]>>4 == 6:
		return netip.AddrFrom16([16]byte(frame[eth+8:])), true
	}
	return netip.Addr{}, false
}

func inLink(a netip.Addr, link []netip.Prefix) bool {
	for _, p := range link {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// baseSpec is a pair on topology t with distinct, non-trivial offsets in
// each direction and both sides scaling windows by 7.
func (h *harness) baseSpec(t topo) PairSpec {
	const (
		upNxt, downNxt = 1_000_000, 5_000_000
		upOff, downOff = 1000, 0x10000000
	)
	return PairSpec{
		A: t.a(), B: t.b(),
		IfindexA: h.ns.ifA, IfindexB: h.ns.ifB,
		Up: DirSpec{
			SeqOff: upOff, TSOff: 500, InShift: 7, OutShift: 7,
			SndNxt: upNxt, AckHi: downNxt + downOff, TSLast: 100,
		},
		Down: DirSpec{
			SeqOff: downOff, TSOff: 9000, InShift: 7, OutShift: 7,
			SndNxt: downNxt, AckHi: upNxt + upOff, TSLast: 7000,
		},
	}
}

func (h *harness) insert(spec PairSpec) {
	h.tb.Helper()
	if err := h.dp.Insert(spec); err != nil {
		h.tb.Fatalf("Insert: %v", err)
	}
	h.tb.Cleanup(func() { h.dp.Delete(spec.A) })
}

func (h *harness) drops() map[string]uint64 {
	h.tb.Helper()
	d, err := h.dp.Drops()
	if err != nil {
		h.tb.Fatalf("Drops: %v", err)
	}
	return d
}

// dropDelta returns the one reason whose counter grew between before and
// after, "" if none did, or "several" if more than one did.
func dropDelta(before, after map[string]uint64) string {
	grew := ""
	for k, v := range after {
		if v != before[k] {
			if grew != "" {
				return "several"
			}
			grew = k
		}
	}
	return grew
}

// twin runs segments through the program and the reference of one pair
// side by side: both must give the verdict and drop reason asked for, and
// leave the same tracked state.
type twin struct {
	tb   testing.TB
	h    *harness
	ref  *refModel
	spec PairSpec
}

// newTwin inserts spec into the program and a fresh reference.
func newTwin(tb testing.TB, h *harness, spec PairSpec) *twin {
	tb.Helper()
	h.insert(spec)
	ref := newRefModel()
	ref.insert(spec, 0)
	ref.mtu = 1500
	return &twin{tb: tb, h: h, ref: ref, spec: spec}
}

// send sends seg on the device toward its source.
func (w *twin) send(what string, seg packet.Seg, want int32, wantDrop string) {
	w.tb.Helper()
	w.sendOn(what, seg, w.h.deviceOf(seg.Bytes()), want, wantDrop)
}

// sendOn sends seg on device dev; wantDrop is the drop reason counted, "" for none.
func (w *twin) sendOn(what string, seg packet.Seg, dev int, want int32, wantDrop string) {
	w.tb.Helper()
	frame := seg.Bytes()
	before := w.h.drops()
	refBefore := map[string]uint64{}
	for k, v := range w.ref.drops {
		refBefore[k] = v
	}
	verdict, _ := w.h.runOn(frame, dev)
	drop := dropDelta(before, w.h.drops())
	refVerdict, _ := w.ref.run(frame, dev)
	refDrop := dropDelta(refBefore, w.ref.drops)
	if verdict != want || drop != wantDrop {
		w.tb.Errorf("%s: program verdict %d drop %q, want %d %q", what, verdict, drop, want, wantDrop)
	}
	if refVerdict != want || refDrop != wantDrop {
		w.tb.Errorf("%s: reference verdict %d drop %q, want %d %q", what, refVerdict, refDrop, want, wantDrop)
	}
	p := w.h.dp.pairOf(w.spec.A)
	for dir, rd := range []*refDir{w.ref.dirs[0], w.ref.dirs[1]} {
		if err := sameState(w.h.dp.entry(p.slot(engine.Direction(dir))), rd); err != "" {
			w.tb.Errorf("%s: direction %d: %s", what, dir, err)
		}
	}
}

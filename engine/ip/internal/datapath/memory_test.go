// Measures the state a spliced pair costs: key and value bytes, and what the kernel accounts for the maps (fdinfo memlock).

package datapath

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/internal/testenv"
)

func memlock(tb testing.TB, m *ebpf.Map) int {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no memlock in fdinfo")
	return 0
}

// TestMemoryPerPair inserts pairs and reports what each costs; README.md
// quotes its output. The table state per pair is exact (two keys, two slot
// numbers, two directional entries); the kernel's figure for the flow hash
// includes its per-element header.
func TestMemoryPerPair(t *testing.T) {
	testenv.RequireRoot(t)
	const pairs, capacity = 2000, 4096
	dp, err := Load(Options{MaxPairs: capacity})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	before := memlock(t, dp.objs.SpliceFlows)
	for i := range pairs {
		insertNthPair(t, dp, i)
	}
	hashPerPair := float64(memlock(t, dp.objs.SpliceFlows)-before) / pairs
	keyVal := 2 * (unsafe.Sizeof(spliceSpliceKey{}) + 4 + unsafe.Sizeof(spliceSpliceDir{}))
	arrayPerPair := float64(memlock(t, dp.objs.SpliceDirs)) / capacity
	t.Logf("per pair: %d bytes of keys and values (2 x (40 key + 4 slot + %d entry)); kernel: %.0f bytes in the flow hash (allocated per pair) + %.0f bytes in the directional array (preallocated per pair of capacity)",
		keyVal, dirSize, hashPerPair, arrayPerPair)
	if hashPerPair < 2*(40+4) || hashPerPair > 1024 {
		t.Errorf("flow hash grew by %.0f bytes per pair", hashPerPair)
	}
	if arrayPerPair < float64(2*dirSize) || arrayPerPair > float64(2*dirSize+64) {
		t.Errorf("directional array costs %.0f bytes per pair of capacity", arrayPerPair)
	}
}

// TestHeapPerPair checks what the control plane keeps of a pair once
// it no longer gathers kept segments (a detached pair): its record and
// its place in the index, a few hundred bytes at most, with 100,000 idle
// pairs in mind. A full PairSpec and maps keyed by 64-byte tuples cost
// about 630.
func TestHeapPerPair(t *testing.T) {
	testenv.RequireRoot(t)
	const pairs = 4000
	dp, err := Load(Options{MaxPairs: pairs})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range pairs {
		dp.StopGathering(insertNthPair(t, dp, i))
	}
	perPair := float64(int64(heap())-int64(before)) / pairs
	t.Logf("%.0f bytes of Go heap per pair", perPair)
	if perPair > 320 {
		t.Errorf("the control plane keeps %.0f bytes of heap per pair: want at most 320", perPair)
	}
	runtime.KeepAlive(dp)
}

// insertNthPair inserts the i-th of a run of distinct IPv4 pairs (a
// client address and an upstream port each) and returns its A tuple.
func insertNthPair(tb testing.TB, dp *Datapath, i int) Tuple {
	tb.Helper()
	a := Tuple{
		Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 40000),
		Dst: topo4.fa,
	}
	b := Tuple{Src: topo4.server, Dst: netip.AddrPortFrom(topo4.fb.Addr(), uint16(20000+i))}
	if err := dp.Insert(PairSpec{A: a, B: b, IfindexA: 1, IfindexB: 1}); err != nil {
		tb.Fatal(err)
	}
	return a
}

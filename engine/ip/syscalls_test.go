// Counting the system calls of a splice, by number, on the thread that splices: what a splice asks the kernel, bounded.

package ip

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

// maxSyscall bounds the system call numbers counted.
const maxSyscall = 512

// syscallCounter counts the system calls of one thread by number, with a
// program on the raw_syscalls:sys_enter tracepoint.
type syscallCounter struct{ counts *ebpf.Map }

// countSyscalls starts counting the system calls of thread tid, until
// the test ends.
func countSyscalls(tb testing.TB, tid int) *syscallCounter {
	tb.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: maxSyscall})
	if err != nil {
		tb.Fatalf("syscall counter map: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg32(asm.R0, asm.R0), // the thread's id, the low half
		asm.JNE.Imm(asm.R0, int32(tid), "out"),
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord), // the call's number
		asm.JGE.Imm(asm.R1, maxSyscall, "out"),
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	}})
	if err != nil {
		tb.Fatalf("syscall counter program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	l, err := link.Tracepoint("raw_syscalls", "sys_enter", prog, nil)
	if err != nil {
		tb.Fatalf("attach the syscall counter: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	return &syscallCounter{counts: m}
}

// snapshot reads the counts in one system call, its own not counted.
func (c *syscallCounter) snapshot(tb testing.TB) [maxSyscall]uint64 {
	tb.Helper()
	var keys [maxSyscall]uint32
	var vals [maxSyscall]uint64
	var cursor ebpf.MapBatchCursor
	n, err := c.counts.BatchLookup(&cursor, keys[:], vals[:], nil)
	if n != maxSyscall {
		tb.Errorf("syscall counts: read %d of %d: %v", n, maxSyscall, err)
	}
	vals[unix.SYS_BPF]-- // the snapshot's
	return vals
}

// spliceSyscalls splices an idle pair of el on a thread of its own and
// returns the system calls the thread made from Splice's start to
// OnSpliced, by number.
func spliceSyscalls(tb testing.TB, el *engineLab) [maxSyscall]uint64 {
	tb.Helper()
	lp := el.pair(tb, "")
	got := make(chan [maxSyscall]uint64, 1)
	failed := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go func() {
		runtime.LockOSThread()
		c := countSyscalls(tb, unix.Gettid())
		_, err := el.e.Splice(ctx, lp.p, engine.Options{
			OnSpliced: func() {
				got <- c.snapshot(tb)
				runtime.UnlockOSThread()
			},
			OnDetached: func() { lp.p.CloseConns() },
		})
		failed <- err
	}()
	select {
	case n := <-got:
		return n
	case err := <-failed:
		tb.Fatalf("Splice returned before splicing: %v", err)
	case <-time.After(waitFor):
		tb.Fatal("Splice neither spliced nor returned")
	}
	return [maxSyscall]uint64{}
}

// TestSpliceSyscalls: splicing an idle pair asks each socket one socket
// option before the pair is held (its namespace: SO_PROTOCOL is not
// asked, TCP_REPAIR refuses an MPTCP socket), and TCP_INFO when freezing
// it; and runs the final reading without masking signals around it. The
// fewest of a few splices, against the Go runtime's own calls.
func TestSpliceSyscalls(t *testing.T) {
	el := newEngineLab(t, Options{})
	least := spliceSyscalls(t, el)
	for range 2 {
		n := spliceSyscalls(t, el)
		for i := range least {
			least[i] = min(least[i], n[i])
		}
	}
	if g := least[unix.SYS_GETSOCKOPT]; g > 4 {
		t.Errorf("a splice makes %d getsockopt calls, want at most 4 (SO_NETNS_COOKIE and TCP_INFO of each socket)", g)
	}
	if g := least[unix.SYS_RT_SIGPROCMASK]; g != 0 {
		t.Errorf("a splice makes %d rt_sigprocmask calls, want none", g)
	}
	var total uint64
	for _, n := range least {
		total += n
	}
	t.Logf("system calls of a splice: %d (getsockopt %d, setsockopt %d, bpf %d)", total,
		least[unix.SYS_GETSOCKOPT], least[unix.SYS_SETSOCKOPT], least[unix.SYS_BPF])
}

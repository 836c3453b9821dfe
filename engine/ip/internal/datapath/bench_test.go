// Benchmarks of the program's cost per packet: the kernel's own timing of each BPF_PROG_TEST_RUN, on the segments of a request/response exchange and on traffic it does not own.

package datapath

import (
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/packet"
)

// progTestRun is the BPF_PROG_TEST_RUN part of union bpf_attr.
type progTestRun struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize                   uint32
	_                                       uint32
}

// timedRun runs the program once on frame, arriving on ifindex, and
// returns its verdict and the nanoseconds the kernel measured around
// that one run (the program and the timer's two clock reads: the
// syscall, the skb's allocation and the copies are outside). Program.Run
// does not return that figure, and Program.Benchmark sets no context
// (the device a frame arrives on), hence the raw call.
func (h *harness) timedRun(prog *ebpf.Program, frame, out []byte, ifindex int) (int32, uint32) {
	h.tb.Helper()
	return h.timedRunOn(h.ns.do, prog, frame, out, ifindex)
}

// timedRunOn is timedRun on the thread do runs its function on, which
// must be in the harness's namespace (the device the frame arrives on
// is looked up there).
func (h *harness) timedRunOn(do func(func()), prog *ebpf.Program, frame, out []byte, ifindex int) (int32, uint32) {
	h.tb.Helper()
	ctx := skbHead{IngressIfindex: uint32(ifindex), Ifindex: uint32(ifindex)}
	attr := progTestRun{
		progFD:      uint32(prog.FD()),
		dataSizeIn:  uint32(len(frame)),
		dataSizeOut: uint32(len(out)),
		dataIn:      uint64(uintptr(unsafe.Pointer(&frame[0]))),
		dataOut:     uint64(uintptr(unsafe.Pointer(&out[0]))),
		repeat:      1,
		ctxSizeIn:   uint32(unsafe.Sizeof(ctx)),
		ctxIn:       uint64(uintptr(unsafe.Pointer(&ctx))),
	}
	var errno unix.Errno
	do(func() {
		_, _, errno = unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	})
	if errno != 0 {
		h.tb.Fatalf("BPF_PROG_TEST_RUN: %v", errno)
	}
	return int32(attr.retval), attr.duration
}

// cpuThread returns a function that runs its argument on a thread of the
// namespace ns bound to CPU cpu, and waits for it.
func cpuThread(tb testing.TB, ns *testNS, cpu int) func(func()) {
	tb.Helper()
	calls, ready := make(chan func()), make(chan error)
	go func() {
		// Never unlocked: the thread, moved into ns, exits with the goroutine.
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		err := netns.Set(ns.handle)
		if err == nil {
			err = unix.SchedSetaffinity(0, &set)
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("a thread on CPU %d: %v", cpu, err)
	}
	tb.Cleanup(func() { close(calls) })
	return func(f func()) {
		done := make(chan struct{})
		calls <- func() { defer close(done); f() }
		<-done
	}
}

// benchPackets runs next(i)'s frame through the program b.N times and
// reports the median of the kernel's times per run as ns/pkt, and per
// kind of packet (next's second result) as ns/<kind>; every run must
// give verdict want. The median, not the mean: a run the CPU was taken
// from in between (an interrupt, another task on a loaded machine)
// counts as one slow run, not as all that time.
func benchPackets(b *testing.B, h *harness, prog *ebpf.Program, want int32, next func(i int) ([]byte, string)) {
	b.Helper()
	benchPacketsOn(b, h, prog, want, next, func(int) func(func()) { return h.ns.do })
}

// benchPacketsOn is benchPackets with packet i run on the thread on(i)
// runs its function on.
func benchPacketsOn(b *testing.B, h *harness, prog *ebpf.Program, want int32, next func(i int) ([]byte, string),
	on func(i int) func(func())) {
	b.Helper()
	out := make([]byte, 4096)
	var all []uint32
	byKind := map[string][]uint32{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		frame, kind := next(i)
		ret, ns := h.timedRunOn(on(i), prog, frame, out, h.deviceOf(frame))
		if ret != want {
			b.Fatalf("packet %d (%s): verdict %d, want %d", i, kind, ret, want)
		}
		all = append(all, ns)
		byKind[kind] = append(byKind[kind], ns)
	}
	b.ReportMetric(median(all), "ns/pkt")
	if len(byKind) > 1 {
		for kind, k := range byKind {
			b.ReportMetric(median(k), "ns/"+kind)
		}
	}
}

func median(v []uint32) float64 {
	slices.Sort(v)
	return float64(v[len(v)/2])
}

// BenchmarkIngress measures the program per packet: a spliced pair's
// client sending 1 KiB requests, each answered by the server's ACK, both
// with timestamps as Linux sends them (the forwarding path, the one that
// costs softirq time under load), on one CPU and with each direction on
// a CPU of its own; a segment of no spliced flow (what
// every other packet on the devices pays); and a program that only
// returns, the timer's own share of every figure.
func BenchmarkIngress(b *testing.B) {
	h := newHarness(b, Options{})
	tp := topo4
	h.insert(h.baseSpec(tp))
	req := make([]byte, 1024)
	opts := func(val, ecr uint32) []byte {
		return append(append(packet.OptNOP(), packet.OptNOP()...), packet.OptTS(val, ecr)...)
	}
	seq := uint32(upNxt)
	exchange := func(i int) ([]byte, string) {
		if i%2 == 0 {
			s := tp.up(packet.Seg{Seq: seq, Ack: upAcked, Flags: packet.ACK | packet.PSH, Win: 1000,
				Opts: opts(300+uint32(i), 7200), Payload: req})
			seq += uint32(len(req))
			return s.Bytes(), "data"
		}
		s := tp.down(packet.Seg{Seq: downNxt, Ack: seq + upOff, Flags: packet.ACK, Win: 1000,
			Opts: opts(7300+uint32(i), 9000+300+uint32(i))})
		return s.Bytes(), "ack"
	}
	b.Run("exchange", func(b *testing.B) {
		benchPackets(b, h, h.dp.objs.SpliceIngress, verdictRedirect, exchange)
	})
	// Each direction on a CPU of its own, as when client and server
	// send from different CPUs: a packet also pays for the pair's lines
	// the other CPU wrote last (and for finding its CPU back from idle
	// between packets, which the timer does not leave out).
	b.Run("exchange-two-cpus", func(b *testing.B) {
		if runtime.NumCPU() < 2 {
			b.Skip("one CPU")
		}
		cpus := [2]func(func()){cpuThread(b, h.ns, 0), cpuThread(b, h.ns, 1)}
		benchPacketsOn(b, h, h.dp.objs.SpliceIngress, verdictRedirect, exchange, func(i int) func(func()) { return cpus[i%2] })
	})
	b.Run("not-spliced", func(b *testing.B) {
		other := tp.withPort(41000)
		frame := other.up(packet.Seg{Seq: 1, Ack: 1, Flags: packet.ACK, Win: 1000, Opts: opts(1, 1), Payload: req}).Bytes()
		benchPackets(b, h, h.dp.objs.SpliceIngress, -1, func(int) ([]byte, string) { return frame, "" })
	})
	b.Run("empty", func(b *testing.B) {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:         ebpf.SchedCLS,
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
			License:      "GPL",
		})
		if err != nil {
			b.Fatalf("loading an empty program: %v", err)
		}
		defer prog.Close()
		frame := tp.up(packet.Seg{Seq: 1, Ack: 1, Flags: packet.ACK, Win: 1000, Opts: opts(1, 1), Payload: req}).Bytes()
		benchPackets(b, h, prog, -1, func(int) ([]byte, string) { return frame, "" })
	})
}

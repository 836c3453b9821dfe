// Benchmarks of a splice and an unsplice of idle pairs, as bench splice-cost measures them, for CPU profiles and allocation counts.

package ip

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
)

// newBenchLab is newEngineLab with a logger that discards, as the bench's
// engines have: a test logger formats every debug record.
func newBenchLab(b *testing.B, opts Options) *engineLab {
	b.Helper()
	return newEngineLabLogging(b, opts, slog.New(slog.DiscardHandler))
}

// BenchmarkSpliceIdle times Splice to OnSpliced for idle pairs spliced one
// after another, the earlier ones staying spliced (bench splice-cost's
// splice_us). The pairs are opened outside the timer.
func BenchmarkSpliceIdle(b *testing.B) {
	el := newBenchLab(b, Options{MaxPairs: 1 << 14})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.StopTimer()
	var times []time.Duration
	var cpu, own time.Duration
	for range b.N {
		lp := el.pair(b, "")
		spliced := make(chan time.Duration, 1)
		failed := make(chan error, 1)
		b.StartTimer()
		c0 := processCPU(b)
		t0 := time.Now()
		go func() {
			// Locked until spliced, so that the thread's clock counts
			// this goroutine's work alone: what the splice itself
			// costs. Unlocked then: thousands of locked threads
			// following their pairs would cost more than the splices.
			runtime.LockOSThread()
			t0 := threadCPU(b)
			_, err := el.e.Splice(ctx, lp.p, engine.Options{
				OnSpliced: func() {
					spliced <- threadCPU(b) - t0
					runtime.UnlockOSThread()
				},
				OnDetached: func() { lp.p.CloseConns() },
			})
			failed <- err
		}()
		select {
		case d := <-spliced:
			times = append(times, time.Since(t0))
			cpu += processCPU(b) - c0
			own += d
		case err := <-failed:
			b.Fatalf("Splice returned before splicing: %v", err)
		case <-time.After(waitFor):
			b.Fatal("Splice neither spliced nor returned")
		}
		b.StopTimer()
	}
	reportPercentiles(b, times, cpu)
	reportOwnCPU(b, own, len(times))
}

// BenchmarkUnspliceIdle times the client's one-byte write to Splice
// returning EndData with the pair back in control mode, for idle pairs
// spliced with the client direction watched and the server direction
// held (bench splice-cost's unsplice_us). The splices are outside the
// timer.
func BenchmarkUnspliceIdle(b *testing.B) {
	el := newBenchLab(b, Options{MaxPairs: 1 << 14})
	b.ReportAllocs()
	b.StopTimer()
	var times []time.Duration
	var cpu, own time.Duration
	for range b.N {
		lp := el.pair(b, "")
		spliced := make(chan struct{})
		done := make(chan time.Duration, 1)
		failed := make(chan error, 1)
		go func() {
			// Locked, so that the thread's clock counts this
			// goroutine's work alone: from OnSpliced to Splice's
			// return it is the unsplice's (the wait in between
			// sleeps).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var t0 time.Duration
			opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, Down: engine.DirOptions{Mode: engine.Hold},
				OnSpliced: func() { t0 = threadCPU(b); close(spliced) }}
			r, err := el.e.Splice(context.Background(), lp.p, opts)
			if err != nil || r.End != engine.EndData {
				failed <- fmt.Errorf("Splice ended with %v, %v; want data", r.End, err)
				return
			}
			done <- threadCPU(b) - t0
		}()
		select {
		case <-spliced:
		case err := <-failed:
			b.Fatal(err)
		case <-time.After(waitFor):
			b.Fatal("Splice neither spliced nor returned")
		}
		b.StartTimer()
		c0 := processCPU(b)
		t0 := time.Now()
		if _, err := lp.client.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		select {
		case d := <-done:
			times = append(times, time.Since(t0))
			cpu += processCPU(b) - c0
			own += d
		case err := <-failed:
			b.Fatal(err)
		case <-time.After(waitFor):
			b.Fatal("Splice did not end on the client's data")
		}
		b.StopTimer()
		if got := readN(b, lp.p.Client, 1); got[0] != 'x' {
			b.Fatalf("read %q after unsplicing, want x", got)
		}
	}
	reportPercentiles(b, times, cpu)
	reportOwnCPU(b, own, len(times))
}

// reportOwnCPU reports the CPU time per operation of the goroutine that
// called Splice (its locked thread's clock): the splice's own work,
// without the other goroutines and processes of a loaded machine.
func reportOwnCPU(b *testing.B, own time.Duration, n int) {
	b.Helper()
	if n > 0 {
		b.ReportMetric(float64(own.Nanoseconds())/1e3/float64(n), "own-cpu-µs/op")
	}
}

// threadCPU is the CPU time of the calling thread.
func threadCPU(tb testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Error(err)
	}
	return time.Duration(ts.Nano())
}

// reportPercentiles reports the median and 99th percentile of times in
// microseconds, as bench splice-cost does, and the process's CPU time per
// operation (cpu, over all of them), which a loaded machine distorts
// less than the wall clock.
func reportPercentiles(b *testing.B, times []time.Duration, cpu time.Duration) {
	b.Helper()
	if len(times) > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(times)), "cpu-µs/op")
	}
	slices.Sort(times)
	if len(times) == 0 {
		return
	}
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds())/1e3, "p99-µs")
}

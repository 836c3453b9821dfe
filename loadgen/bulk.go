// Bulk and Trace: long-lived connections moving as many bytes as they can, measured over a window or sampled over time.

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// bulkBufSize is the size of each read and write: large, so that the
// generator's syscalls are not what is measured, as iperf3's default, and
// small enough that the byte counters move often.
const bulkBufSize = 128 << 10

// BulkResult is what Bulk measured over its window.
type BulkResult struct {
	Dir     Dir
	Bytes   int64         // bytes moved in the window, all connections (both ways for Both)
	PerConn []int64       // each connection's share of Bytes
	Elapsed time.Duration // length of the window
	Gbps    float64       // Bytes over Elapsed, in gigabits per second
}

// Bulk opens conns connections to addr, moves bytes in direction dir for a
// warm-up (WithWarmup) and then for dur, and reports the bytes moved during
// dur only. A connection that fails or is closed by the server before the
// end fails the run; the numbers so far are returned with the error.
func Bulk(ctx context.Context, dial DialFunc, addr string, conns int, dur time.Duration, dir Dir, opts ...Option) (BulkResult, error) {
	res := BulkResult{Dir: dir}
	if conns <= 0 || dur <= 0 || dir > Both {
		return res, fmt.Errorf("loadgen: bulk needs conns > 0, dur > 0 and a direction; got %d, %v, %v", conns, dur, dir)
	}
	cfg := newConfig(opts)
	f, err := startFlows(ctx, dial.orDefault(), addr, conns, dir)
	if err != nil {
		return res, err
	}
	defer f.stop()

	if err := sleepCtx(ctx, cfg.warmup, f.failed); err != nil {
		return res, err
	}
	if err := f.failure(); err != nil {
		return res, fmt.Errorf("loadgen: bulk %s during warm-up: %w", dir, err)
	}
	before, t0 := f.counts(), time.Now()
	err = sleepCtx(ctx, dur, f.failed)
	after := f.counts()
	res.Elapsed = time.Since(t0)
	res.PerConn = make([]int64, conns)
	for i := range after {
		res.PerConn[i] = after[i] - before[i]
		res.Bytes += res.PerConn[i]
	}
	res.Gbps = gbps(res.Bytes, res.Elapsed)
	if err != nil {
		return res, err
	}
	if err := f.stop(); err != nil {
		return res, fmt.Errorf("loadgen: bulk %s: %w", dir, err)
	}
	return res, nil
}

// Sample is one interval of a Trace.
type Sample struct {
	At    time.Duration // end of the interval, since the connections were up
	Bytes int64         // bytes moved during the interval
	Gbps  float64       // Bytes over the interval's measured length
}

// Trace runs a bulk transfer (WithDir, default Down; WithConns, default 1)
// against addr for dur and samples the bytes moved every interval, from the
// first byte on: a trace shows the ramp-up that Bulk leaves out. A failure
// returns the samples so far with the error.
func Trace(ctx context.Context, dial DialFunc, addr string, dur, interval time.Duration, opts ...Option) ([]Sample, error) {
	cfg := newConfig(opts)
	if dur <= 0 || interval <= 0 || cfg.conns <= 0 || cfg.dir > Both {
		return nil, fmt.Errorf("loadgen: trace needs dur, interval, conns > 0 and a direction; got %v, %v, %d, %v",
			dur, interval, cfg.conns, cfg.dir)
	}
	f, err := startFlows(ctx, dial.orDefault(), addr, cfg.conns, cfg.dir)
	if err != nil {
		return nil, err
	}
	defer f.stop()

	samples := make([]Sample, 0, int(dur/interval)+1)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	start, last, lastBytes := f.started, f.started, int64(0)
	for {
		select {
		case <-ctx.Done():
			return samples, ctx.Err()
		case <-f.failed:
			return samples, fmt.Errorf("loadgen: trace %s: %w", cfg.dir, f.failure())
		case now := <-tick.C:
			total := f.total()
			samples = append(samples, Sample{
				At:    now.Sub(start),
				Bytes: total - lastBytes,
				Gbps:  gbps(total-lastBytes, now.Sub(last)),
			})
			last, lastBytes = now, total
			if now.Sub(start) >= dur {
				if err := f.stop(); err != nil {
					return samples, fmt.Errorf("loadgen: trace %s: %w", cfg.dir, err)
				}
				return samples, nil
			}
		}
	}
}

// flows are the connections of one Bulk or Trace, each with a sender, a
// receiver or both, counting bytes into a per-connection counter.
type flows struct {
	conns   []net.Conn
	bytes   []atomic.Int64
	started time.Time // when every connection was up
	wg      sync.WaitGroup

	stopping atomic.Bool
	stopOnce sync.Once
	failOnce sync.Once
	failed   chan struct{} // closed on the first failure before stop
	err      error         // that failure; read only after failed is closed
}

// startFlows dials n connections to addr and starts moving bytes on each.
func startFlows(ctx context.Context, dial DialFunc, addr string, n int, dir Dir) (*flows, error) {
	f := &flows{bytes: make([]atomic.Int64, n), failed: make(chan struct{})}
	for range n {
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("loadgen: dial %s: %w", addr, err)
		}
		f.conns = append(f.conns, c)
	}
	f.started = time.Now()
	payload := randomPayload(bulkBufSize) // shared: writers only read it
	for i, c := range f.conns {
		if dir != Down {
			f.wg.Go(func() { f.send(c, &f.bytes[i], payload) })
		}
		if dir != Up {
			f.wg.Go(func() { f.receive(c, &f.bytes[i]) })
		}
	}
	return f, nil
}

func (f *flows) send(c net.Conn, count *atomic.Int64, payload []byte) {
	for {
		n, err := c.Write(payload)
		count.Add(int64(n))
		if err != nil {
			f.fail(err)
			return
		}
	}
}

func (f *flows) receive(c net.Conn, count *atomic.Int64) {
	buf := make([]byte, bulkBufSize)
	for {
		n, err := c.Read(buf)
		count.Add(int64(n))
		if errors.Is(err, io.EOF) {
			f.fail(errors.New("server closed the stream"))
			return
		}
		if err != nil {
			f.fail(err)
			return
		}
	}
}

// fail records the first error that happened before stop; errors after
// stop are the stop itself.
func (f *flows) fail(err error) {
	if f.stopping.Load() {
		return
	}
	f.failOnce.Do(func() {
		f.err = err
		close(f.failed)
	})
}

// failure returns the recorded failure, if any.
func (f *flows) failure() error {
	select {
	case <-f.failed:
		return f.err
	default:
		return nil
	}
}

func (f *flows) counts() []int64 {
	out := make([]int64, len(f.bytes))
	for i := range f.bytes {
		out[i] = f.bytes[i].Load()
	}
	return out
}

func (f *flows) total() int64 {
	var sum int64
	for i := range f.bytes {
		sum += f.bytes[i].Load()
	}
	return sum
}

// stop closes every connection, waits for the movers and returns the first
// failure before the stop. It is idempotent.
func (f *flows) stop() error {
	f.stopOnce.Do(func() {
		f.stopping.Store(true)
		for _, c := range f.conns {
			c.Close()
		}
		f.wg.Wait()
	})
	return f.failure()
}

// randomPayload returns n bytes that no forwarder or NIC can compress.
func randomPayload(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{'l', 'o', 'a', 'd', 'g', 'e', 'n'}).Read(b)
	return b
}

// The unsplice half of splice-cost (issue 7): time for engine ip to give a spliced pair back in control mode when its client sends data.

package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"
)

// unsplicer is an engine that gives pairs back in control mode by
// rebuilding their sockets (engine ip); the bench measures it.
type unsplicer interface {
	UnspliceTimes() []time.Duration
}

// measuresUnsplice reports whether en's unsplice cost is measured: the
// other engines never leave their sockets, so giving a pair back costs
// them nothing worth a row.
func measuresUnsplice(en engine.Engine) bool {
	_, ok := en.(unsplicer)
	return ok
}

// unspliceIdlePairs splices n idle pairs one after another with the client
// direction watched and the server direction held, as a proxy splices a
// pair waiting for the next request; then the client sends one byte, which
// ends the splice (EndData). Each pair's cost is the time from the
// client's write to Splice returning with the pair back in control mode
// (the byte readable on the forwarder's socket), in microseconds. It also
// returns how many pairs the engine declined to splice.
func (e *Env) unspliceIdlePairs(ctx context.Context, en engine.Engine, n int) ([]float64, int, error) {
	pairs, clients, closeAll, err := e.idlePairsWithClients(ctx, n, en)
	defer closeAll()
	if err != nil {
		return nil, 0, err
	}
	costs := make([]float64, 0, n)
	fellBack := 0
	for i, p := range pairs {
		d, err := unspliceOne(ctx, en, p, clients[i])
		if engine.IsFallback(err) {
			// Not spliced at all (a peer's answer to the timestamp
			// probe did not come): nothing to unsplice.
			fellBack++
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("pair %d: %w", p.ID, err)
		}
		costs = append(costs, float64(d.Nanoseconds())/1e3)
	}
	return costs, fellBack, nil
}

// unspliceOne splices p (client direction watched, server direction held),
// makes the client send a byte and times the unsplice.
func unspliceOne(ctx context.Context, en engine.Engine, p *engine.Pair, client net.Conn) (time.Duration, error) {
	spliced := make(chan struct{})
	type result struct {
		r   engine.Result
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, Down: engine.DirOptions{Mode: engine.Hold},
		OnSpliced: func() { close(spliced) }}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := en.Splice(sctx, p, opts)
		done <- result{r, err, time.Now()}
	}()
	select {
	case <-spliced:
	case r := <-done:
		if engine.IsFallback(r.err) {
			return 0, r.err
		}
		return 0, fmt.Errorf("splice ended before forwarding was in place: %v, %v", r.r.End, r.err)
	case <-time.After(spliceTimeout):
		return 0, fmt.Errorf("OnSpliced not called within %v", spliceTimeout)
	}
	start := time.Now()
	if _, err := client.Write([]byte{'x'}); err != nil {
		return 0, err
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(spliceTimeout):
		return 0, fmt.Errorf("the splice did not end within %v of the client's data", spliceTimeout)
	}
	if r.err != nil || r.r.End != engine.EndData {
		return 0, fmt.Errorf("splice ended with %v, %v; want data", r.r.End, r.err)
	}
	// The byte must be there for the proxy, without a retransmission.
	p.Client.SetReadDeadline(time.Now().Add(spliceTimeout))
	defer p.Client.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(p.Client, make([]byte, 1)); err != nil {
		return 0, fmt.Errorf("read the client's byte after unsplicing: %w", err)
	}
	return r.at.Sub(start), nil
}

// addUnspliceCost measures en's unsplice cost into smp, if it has one; the
// note says how many pairs were not spliced.
func (e *Env) addUnspliceCost(ctx context.Context, smp *samples, en engine.Engine, n int) (string, error) {
	if !measuresUnsplice(en) {
		return "", nil
	}
	costs, fellBack, err := e.unspliceIdlePairs(ctx, en, n)
	if err != nil {
		return "", fmt.Errorf("unsplice: %w", err)
	}
	if len(costs) == 0 {
		return "", fmt.Errorf("unsplice: none of %d pairs was spliced", n)
	}
	slices.Sort(costs)
	smp.add(en.Name(), "unsplice_us_p50", "µs", percentile(costs, 0.5))
	smp.add(en.Name(), "unsplice_us_p99", "µs", percentile(costs, 0.99))
	if fellBack > 0 {
		return fmt.Sprintf("%s: unsplice measured on %d of %d pairs; %d fell back when splicing", en.Name(), len(costs), n, fellBack), nil
	}
	return "", nil
}

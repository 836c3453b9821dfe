// Connect: a connection per transaction (dial, send, read the echo, close) from concurrent clients, the TCP half of a connection-rate test.

package loadgen

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// ConnectResult is what Connect measured over its window.
type ConnectResult struct {
	Conns   int64         // transactions completed in the window, a connection each
	Errors  int64         // transactions that failed (dial, write, read, a wrong echo)
	Elapsed time.Duration // length of the window
	CPS     float64       // Conns per second
	// P50, P99 and Max are the transaction's time, dial to the echo's last
	// byte read.
	P50, P99, Max time.Duration
	// FirstErr is the first failure, for the report.
	FirstErr error
}

// Connect runs conc clients for dur, each in a loop: dial addr (an origin
// echo, straight or through a forwarder), write size bytes, read them back,
// close. The client closes first, as a client of a request/response
// protocol does, so its side holds the TIME_WAIT. A failed transaction is
// counted, not fatal: a connection-rate test reports its errors.
func Connect(ctx context.Context, dial DialFunc, addr string, size, conc int, dur time.Duration) (ConnectResult, error) {
	var res ConnectResult
	if size <= 0 || conc <= 0 || dur <= 0 {
		return res, fmt.Errorf("loadgen: connect needs size, conc and dur > 0; got %d, %d, %v", size, conc, dur)
	}
	d := dial.orDefault()
	end := time.Now().Add(dur)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(5*time.Second))
	defer cancel()
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	payload := randomPayload(size)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var errs int64
			var first error
			buf := make([]byte, size)
			for time.Now().Before(end) && runCtx.Err() == nil {
				t := time.Now()
				if err := connectOnce(runCtx, d, addr, payload, buf); err != nil {
					if runCtx.Err() != nil {
						break
					}
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				if done := time.Now(); done.Before(end) {
					mine = append(mine, done.Sub(t))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			res.Errors += errs
			if res.FirstErr == nil {
				res.FirstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.Conns, res.Elapsed = int64(len(lat)), dur
	res.CPS = float64(res.Conns) / dur.Seconds()
	res.P50, res.P99, res.Max = latencies(lat)
	return res, nil
}

// connectOnce is one transaction on a connection of its own.
func connectOnce(ctx context.Context, dial DialFunc, addr string, payload, buf []byte) error {
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return transact(c, payload, buf)
}

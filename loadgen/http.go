// HTTPGet: a fixed number of GETs at a fixed concurrency, checked for length and optionally content.

package loadgen

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/origin"
)

// HTTPResult is what HTTPGet measured.
type HTTPResult struct {
	Requests      int64         // succeeded: status 200 and exactly Content-Length body bytes (and the right digest, when verifying)
	Errors        int64         // failed in any way
	FirstErr      error         // the first failure, for diagnosis
	Dials         int64         // connections opened
	Bytes         int64         // body bytes of successful requests
	Elapsed       time.Duration // from the first request to the last response
	RPS           float64       // Requests per second
	P50, P99, Max time.Duration // latency of successful requests, request sent to body read
}

// HTTPGet sends n GET requests for rawURL from concurrency workers, over
// connections dialled by dial, with keep-alive unless WithKeepAlive(false).
// A response counts as successful only with status 200, a Content-Length
// and exactly that many body bytes; WithVerifyBody also checks the body's
// digest against origin.ObjectSHA256. Failed requests are counted, not
// fatal: the error is non-nil only for bad arguments, a cancelled ctx, or
// when no request succeeded.
func HTTPGet(ctx context.Context, dial DialFunc, rawURL string, n, concurrency int, opts ...Option) (HTTPResult, error) {
	var res HTTPResult
	if n <= 0 || concurrency <= 0 {
		return res, fmt.Errorf("loadgen: http needs n > 0 and concurrency > 0; got %d, %d", n, concurrency)
	}
	if _, err := http.NewRequest(http.MethodGet, rawURL, nil); err != nil {
		return res, fmt.Errorf("loadgen: %w", err)
	}
	cfg := newConfig(opts)
	var want *[32]byte
	if cfg.verify {
		size, err := objectSize(rawURL)
		if err != nil {
			return res, err
		}
		sum := origin.ObjectSHA256(size)
		want = &sum
	}

	var dials atomic.Int64
	d := dial.orDefault()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d(ctx, network, addr)
		},
		DisableKeepAlives: cfg.noKeepAlive,
		// Without the cap the transport dials a spare connection whenever a
		// request waits, and the load would not be concurrency connections.
		MaxConnsPerHost:     concurrency,
		MaxIdleConnsPerHost: concurrency,
		DisableCompression:  true, // count and check the bytes the origin sent
	}
	if cfg.proxy != nil {
		tr.Proxy = http.ProxyURL(cfg.proxy)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, n)
		wg       sync.WaitGroup
		firstErr error
	)
	start := time.Now()
	for range min(concurrency, n) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t := time.Now()
				nbytes, err := get(ctx, client, rawURL, want)
				took := time.Since(t)
				mu.Lock()
				if err != nil {
					res.Errors++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					res.Requests++
					res.Bytes += nbytes
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.FirstErr = firstErr
	res.Dials = dials.Load()
	res.RPS = float64(res.Requests) / res.Elapsed.Seconds()
	res.P50, res.P99, res.Max = latencies(lat)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.Requests == 0 {
		return res, fmt.Errorf("loadgen: all %d requests failed, first: %w", n, firstErr)
	}
	return res, nil
}

// get performs one request and returns its body length.
func get(ctx context.Context, client *http.Client, rawURL string, want *[32]byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body) // lets keep-alive reuse the connection
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	if resp.ContentLength < 0 {
		return 0, errors.New("response without Content-Length")
	}
	var h hash.Hash
	dst := io.Discard
	if want != nil {
		h = sha256.New()
		dst = h
	}
	nbytes, err := io.Copy(dst, resp.Body)
	if err != nil {
		return nbytes, fmt.Errorf("body after %d of %d bytes: %w", nbytes, resp.ContentLength, err)
	}
	if nbytes != resp.ContentLength {
		return nbytes, fmt.Errorf("body of %d bytes, Content-Length %d", nbytes, resp.ContentLength)
	}
	if h != nil && [32]byte(h.Sum(nil)) != *want {
		return nbytes, errors.New("body differs from the origin object")
	}
	return nbytes, nil
}

// objectSize returns the size an origin object URL names.
func objectSize(rawURL string) (int64, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	sizeStr, ok := strings.CutPrefix(u.Path, "/obj/")
	if !ok {
		return 0, fmt.Errorf("loadgen: body verification needs an origin object URL (/obj/<size>), got %q", u.Path)
	}
	size, err := origin.ParseSize(sizeStr)
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	return size, nil
}

// Tests of the generators against origin servers on loopback; they check numbers exist and runs stay bounded, never speeds.

package loadgen

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

func TestBulk(t *testing.T) {
	for _, tt := range []struct {
		dir   Dir
		proto origin.Proto
	}{
		{Up, origin.Sink},
		{Down, origin.Source},
		{Both, origin.Echo},
	} {
		t.Run(tt.dir.String(), func(t *testing.T) {
			testenv.NoGoroutineLeaks(t)
			timeBound(t, testWarmup+testDur+testBound)
			s := startOrigin(t)
			addr := serve(t, s, tt.proto)
			res, err := Bulk(t.Context(), nil, addr, 2, testDur, tt.dir, WithWarmup(testWarmup))
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes <= 0 || res.Gbps <= 0 || res.Elapsed < testDur {
				t.Errorf("result %+v: want bytes and rate over at least %v", res, testDur)
			}
			var sum int64
			for i, b := range res.PerConn {
				if b <= 0 {
					t.Errorf("connection %d moved %d bytes", i, b)
				}
				sum += b
			}
			if len(res.PerConn) != 2 || sum != res.Bytes {
				t.Errorf("per-connection bytes %v do not add up to %d", res.PerConn, res.Bytes)
			}
			if got := s.Stats()[tt.proto].Accepted; got != 2 {
				t.Errorf("origin accepted %d connections, want 2", got)
			}
		})
	}
}

// TestBulkFailsWhenOriginGoes closes the origin mid-run: Bulk must return
// an error promptly instead of running out its time.
func TestBulkFailsWhenOriginGoes(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	timeBound(t, testBound)
	s := startOrigin(t)
	addr := serve(t, s, origin.Source)
	done := make(chan error, 1)
	go func() {
		_, err := Bulk(t.Context(), nil, addr, 1, time.Hour, Down, WithWarmup(0))
		done <- err
	}()
	for s.Stats()[origin.Source].BytesOut == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Close()
	if err := <-done; err == nil {
		t.Fatal("Bulk succeeded although the origin went away")
	}
}

func TestBulkDialFailure(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	if _, err := Bulk(t.Context(), nil, addr, 3, testDur, Up); err == nil {
		t.Fatal("Bulk to a closed port succeeded")
	}
}

func TestRR(t *testing.T) {
	for _, tt := range []struct {
		name  string
		proto origin.Proto
		size  int
	}{
		{"echo 1 byte", origin.Echo, 1},
		{"echo 64KiB", origin.Echo, 64 << 10},
		{"rr 1460 bytes", origin.RR, 1460},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testenv.NoGoroutineLeaks(t)
			timeBound(t, testWarmup+testDur+testBound)
			s := startOrigin(t)
			addr := serve(t, s, tt.proto, origin.WithRRSize(tt.size))
			res, err := RR(t.Context(), nil, addr, tt.size, testDur, WithWarmup(testWarmup))
			if err != nil {
				t.Fatal(err)
			}
			if res.Txns <= 0 || res.TPS <= 0 || res.Elapsed != testDur {
				t.Errorf("result %+v: want transactions over %v", res, testDur)
			}
			if !(0 < res.P50 && res.P50 <= res.P99 && res.P99 <= res.Max) {
				t.Errorf("latencies p50 %v p99 %v max %v out of order", res.P50, res.P99, res.Max)
			}
			if in := s.Stats()[tt.proto].BytesIn; in < res.Txns*int64(tt.size) {
				t.Errorf("origin read %d bytes, fewer than %d transactions of %d", in, res.Txns, tt.size)
			}
		})
	}
}

// TestRRRejectsWrongResponses points RR at a source, whose bytes are not
// an echo of the request.
func TestRRRejectsWrongResponses(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := startOrigin(t)
	_, err := RR(t.Context(), nil, serve(t, s, origin.Source), 100, testDur)
	if err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("err = %v, want a response mismatch", err)
	}
}

// TestRRHonoursContext points RR at a listener nobody accepts on, so no
// response ever comes: RR must end with the context, not its duration.
func TestRRHonoursContext(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	timeBound(t, testBound)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := RR(ctx, nil, l.Addr().String(), 1, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestHTTPGet(t *testing.T) {
	const n, conc, size = 40, 4, 100_000
	for _, keepAlive := range []bool{true, false} {
		t.Run(map[bool]string{true: "keep-alive", false: "no keep-alive"}[keepAlive], func(t *testing.T) {
			testenv.NoGoroutineLeaks(t)
			timeBound(t, testBound)
			s := startOrigin(t)
			url := "http://" + serve(t, s, origin.HTTP) + origin.ObjectPath(size)
			res, err := HTTPGet(t.Context(), nil, url, n, conc, WithKeepAlive(keepAlive), WithVerifyBody())
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != n || res.Errors != 0 || res.Bytes != n*size {
				t.Errorf("result %+v: want %d requests of %d bytes, no errors", res, n, size)
			}
			if res.RPS <= 0 || !(0 < res.P50 && res.P50 <= res.P99 && res.P99 <= res.Max) {
				t.Errorf("result %+v: want a rate and ordered latencies", res)
			}
			if keepAlive && res.Dials > conc || !keepAlive && res.Dials != n {
				t.Errorf("%d dials for %d requests at concurrency %d, keep-alive %v", res.Dials, n, conc, keepAlive)
			}
			if got := s.Stats()[origin.HTTP].Accepted; got != res.Dials {
				t.Errorf("origin accepted %d connections, HTTPGet dialled %d", got, res.Dials)
			}
		})
	}
}

// TestHTTPGetCountsFailures covers a refused object and, with an impostor
// server that sends the right length of the wrong bytes, body verification.
func TestHTTPGetCountsFailures(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	timeBound(t, testBound)
	s := startOrigin(t)
	res, err := HTTPGet(t.Context(), nil, "http://"+serve(t, s, origin.HTTP)+"/obj/lots", 5, 2)
	if err == nil || res.Errors != 5 || res.Requests != 0 || !strings.Contains(res.FirstErr.Error(), "400") {
		t.Errorf("bad object: result %+v, err %v; want 5 errors with status 400", res, err)
	}

	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1000))
	}))
	defer impostor.Close()
	url := impostor.URL + origin.ObjectPath(1000)
	if res, err := HTTPGet(t.Context(), nil, url, 5, 2); err != nil || res.Requests != 5 {
		t.Errorf("without verification: result %+v, err %v; want 5 requests", res, err)
	}
	if res, err := HTTPGet(t.Context(), nil, url, 5, 2, WithVerifyBody()); err == nil || res.Errors != 5 {
		t.Errorf("with verification: result %+v, err %v; want 5 errors", res, err)
	}
	if _, err := HTTPGet(t.Context(), nil, impostor.URL+"/health", 1, 1, WithVerifyBody()); err == nil {
		t.Error("verification accepted a URL that names no origin object")
	}
	impostor.CloseClientConnections()
}

func TestTrace(t *testing.T) {
	const dur, interval = 300 * time.Millisecond, 50 * time.Millisecond
	for _, dir := range []Dir{Down, Up} {
		t.Run(dir.String(), func(t *testing.T) {
			testenv.NoGoroutineLeaks(t)
			timeBound(t, dur+testBound)
			s := startOrigin(t)
			addr := serve(t, s, map[Dir]origin.Proto{Down: origin.Source, Up: origin.Sink}[dir])
			samples, err := Trace(t.Context(), nil, addr, dur, interval, WithDir(dir), WithConns(2))
			if err != nil {
				t.Fatal(err)
			}
			if len(samples) < 2 || samples[len(samples)-1].At < dur {
				t.Fatalf("%d samples ending at %v, want several covering %v", len(samples), samples[len(samples)-1].At, dur)
			}
			var total int64
			for i, smp := range samples {
				if i > 0 && smp.At <= samples[i-1].At {
					t.Errorf("sample %d at %v, not after %v", i, smp.At, samples[i-1].At)
				}
				if smp.Bytes < 0 || (smp.Bytes > 0) != (smp.Gbps > 0) {
					t.Errorf("sample %d: %+v", i, smp)
				}
				total += smp.Bytes
			}
			if total <= 0 {
				t.Error("trace moved no bytes")
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	p50, p99, maxLat := latencies(d)
	if p50 != 50 || p99 != 99 || maxLat != 100 {
		t.Errorf("p50 %d p99 %d max %d of 1..100, want 50 99 100", p50, p99, maxLat)
	}
	if p50, p99, maxLat := latencies([]time.Duration{7}); p50 != 7 || p99 != 7 || maxLat != 7 {
		t.Errorf("one sample 7: p50 %d p99 %d max %d", p50, p99, maxLat)
	}
	if p50, _, _ := latencies(nil); p50 != 0 {
		t.Errorf("no samples: p50 %d, want 0", p50)
	}
}

func TestHTTPGetThroughProxy(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	timeBound(t, testBound)
	s := startOrigin(t)
	target, err := url.Parse("http://" + serve(t, s, origin.HTTP))
	if err != nil {
		t.Fatal(err)
	}
	// A forward proxy sees absolute URIs; it relays them to the origin.
	var absolute atomic.Int64
	relay := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.RequestURI, "http://origin.invalid/") {
			absolute.Add(1)
		}
		relay.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	proxyURL, _ := url.Parse(proxy.URL)
	const n = 10
	res, err := HTTPGet(t.Context(), nil, "http://origin.invalid"+origin.ObjectPath(5000), n, 2, WithProxy(proxyURL), WithVerifyBody())
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != n || absolute.Load() != n {
		t.Errorf("%d requests succeeded, the proxy saw %d absolute URIs; want %d of each", res.Requests, absolute.Load(), n)
	}
}

// TestConnect checks that every transaction is a connection of its own
// (the origin accepts as many as Connect counts) and that a peer that does
// not echo is counted as errors, not as connections.
func TestConnect(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	timeBound(t, testDur+testBound)
	s := startOrigin(t)
	res, err := Connect(t.Context(), nil, serve(t, s, origin.Echo), 100, 4, testDur)
	if err != nil {
		t.Fatal(err)
	}
	if res.Conns <= 0 || res.Errors != 0 || res.CPS <= 0 || res.Elapsed != testDur {
		t.Fatalf("result %+v: want connections over %v and no errors", res, testDur)
	}
	if !(0 < res.P50 && res.P50 <= res.P99 && res.P99 <= res.Max) {
		t.Errorf("latencies p50 %v p99 %v max %v out of order", res.P50, res.P99, res.Max)
	}
	if acc := s.Stats()[origin.Echo].Accepted; acc < res.Conns {
		t.Errorf("origin accepted %d connections, fewer than the %d transactions counted", acc, res.Conns)
	}

	bad, err := Connect(t.Context(), nil, serve(t, s, origin.Source), 100, 2, testDur)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Conns != 0 || bad.Errors == 0 || bad.FirstErr == nil {
		t.Errorf("through a source: result %+v; want errors and no connection counted", bad)
	}
}

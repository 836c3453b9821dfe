// Tests of how the kinds that pick among servers treat one that fails: skipped for fail_timeout after max_fails failures (connects, and requests http-reverse's server does not answer), a request that can be sent again moved to the next server, a server's keep-alive ending no failure, and active health checks of upstream lists.

package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// failoverListeners are one listener of each kind that picks among servers
// (tcp, filter, http-reverse), each in front of servers, with fail keys
// (say "max_fails: 1, fail_timeout: 1h") on the list or the pool. The
// http-reverse listener keeps no idle upstream connection, so that every
// request dials, as in the other two.
func failoverListeners(tb testing.TB, fail string, servers ...string) []config.Listener {
	tb.Helper()
	list := "['" + strings.Join(servers, "', '") + "']"
	cfg := fwdtest.Config(tb, `
listeners:
  - {name: tcp, listen: '127.0.0.1:0', proxy: tcp, engine: copy, upstream: %[1]s, %[2]s}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, upstream: %[1]s, %[2]s}
  - name: http-reverse
    listen: '127.0.0.1:0'
    proxy: http-reverse
    engine: copy
    pools: [{name: p, servers: %[1]s, %[2]s}]
    routes: [{pool: p}]
    upstream_pool: {max_idle_per_server: 0}
`, list, fail)
	return cfg.Listeners
}

// getStatus sends one GET on a new connection to addr and returns the
// status, or 0 when the connection ended without a response (a tcp
// listener whose upstreams all failed).
func getStatus(tb testing.TB, addr string) int {
	tb.Helper()
	c := fwdtest.DialFor(tb, addr, 10*time.Second)
	defer c.Close()
	fmt.Fprintf(c, "GET /obj/1KiB HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// connects is how many upstream connects listener made, successful or not.
func connects(tb testing.TB, f *forwarder.Forwarder, listener string) uint64 {
	tb.Helper()
	return uint64(fwdtest.Metric(f, "splicer_upstream_connect_seconds", "listener", listener))
}

// revListener is the YAML list item of an http-reverse listener name
// that sends every request to its one pool p, given as a flow map with
// keys (say "servers: ['%s']") and extra listener keys.
func revListener(name, pool, extra string) string {
	return fmt.Sprintf("  - {name: %s, listen: '127.0.0.1:0', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, %s}]%s}\n", name, pool, extra)
}

// answeredOK reads the next response on r, reads its body, and fails the
// test, naming the request what, unless it is a 200.
func answeredOK(tb testing.TB, r *bufio.Reader, what string) {
	tb.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: %s, want 200", what, resp.Status)
	}
}

// skipped is splicer_upstream_skipped for server of listener's pool.
func skipped(f *forwarder.Forwarder, listener, pool, server string) float64 {
	return fwdtest.Metric(f, "splicer_upstream_skipped", "listener", listener, "pool", pool, "server", server)
}

// poolOf is the pool label a listener's servers are exported under.
func poolOf(listener string) string {
	if listener == "http-reverse" {
		return "p"
	}
	return "upstream"
}

// TestFailedServersAreSkipped: with a dead server (connects refused) beside
// a live one, the first request that meets the dead server is served by
// the live one after one failed connect; from then on the dead server is
// skipped (splicer_upstream_skipped 1), so 8 more requests make 8
// connects, where round robin without skipping would make 12. With
// max_fails: 0 nothing is skipped.
func TestFailedServersAreSkipped(t *testing.T) {
	live, dead := fwdtest.HTTPOrigin(t), testenv.FreeAddr(t)
	const requests = 10
	for _, tc := range []struct {
		fail string
		want uint64 // connects for requests requests
	}{
		{"max_fails: 1, fail_timeout: 1h", requests + 1},
		{"max_fails: 0", requests + requests/2},
	} {
		f := fwdtest.Start(t, failoverListeners(t, tc.fail, dead, live)...)
		for _, l := range []string{"tcp", "filter", "http-reverse"} {
			t.Run(tc.fail+"/"+l, func(t *testing.T) {
				for i := range requests {
					if got := getStatus(t, f.Addr(l).String()); got != http.StatusOK {
						t.Fatalf("request %d through %s: status %d, want 200: the live server should answer", i+1, l, got)
					}
				}
				if got := connects(t, f, l); got != tc.want {
					t.Errorf("%d requests through %s made %d upstream connects, want %d", requests, l, got, tc.want)
				}
				wantSkipped := 0.0
				if tc.want == requests+1 {
					wantSkipped = 1
				}
				if got := skipped(f, l, poolOf(l), dead); got != wantSkipped {
					t.Errorf("splicer_upstream_skipped of the dead server: %v, want %v", got, wantSkipped)
				}
				if got := skipped(f, l, poolOf(l), live); got != 0 {
					t.Errorf("splicer_upstream_skipped of the live server: %v, want 0", got)
				}
				// Every connect beyond one per request failed on the dead server.
				wantFailures := float64(tc.want - requests)
				if got := fwdtest.Metric(f, "splicer_upstream_failures_total", "listener", l, "pool", poolOf(l), "server", dead); got != wantFailures {
					t.Errorf("splicer_upstream_failures_total of the dead server: %v, want %v", got, wantFailures)
				}
			})
		}
	}
}

// TestEverySkippedServerIsStillTried: a list or pool whose only server is
// skipped still tries it for every request (each fails, 502 or a closed
// connection), rather than refusing without a connect; once the server
// is back, the next request reaches it and it is no longer skipped.
func TestEverySkippedServerIsStillTried(t *testing.T) {
	addr := testenv.FreeAddr(t)
	f := fwdtest.Start(t, failoverListeners(t, "max_fails: 1, fail_timeout: 1h", addr)...)
	for _, l := range []string{"tcp", "filter", "http-reverse"} {
		t.Run(l, func(t *testing.T) {
			for i := range 3 {
				if got := getStatus(t, f.Addr(l).String()); got == http.StatusOK {
					t.Fatalf("request %d: 200 from a server that is down", i+1)
				}
			}
			if got := connects(t, f, l); got != 3 {
				t.Errorf("3 requests to a skipped server made %d connects, want 3", got)
			}
			if got := skipped(f, l, poolOf(l), addr); got != 1 {
				t.Errorf("splicer_upstream_skipped: %v, want 1", got)
			}
		})
	}
	fwdtest.ServeHTTPOriginAt(t, addr)
	for _, l := range []string{"tcp", "filter", "http-reverse"} {
		t.Run(l+"/back", func(t *testing.T) {
			if got := getStatus(t, f.Addr(l).String()); got != http.StatusOK {
				t.Fatalf("status %d once the server is back, want 200", got)
			}
			if got := skipped(f, l, poolOf(l), addr); got != 0 {
				t.Errorf("splicer_upstream_skipped once it connected again: %v, want 0", got)
			}
		})
	}
}

// TestServersThatDoNotAnswerAreSkipped: http-reverse and the filter count
// a server that takes the request and closes without answering as failed,
// as nginx does: of 10 GETs (a connection each) through it and a live
// server, with max_fails 1 only the first meets it, with max_fails 0 every
// other one does. Through http-reverse each such GET goes on to the live
// server (it may be sent again), so all 10 are answered 200; the filter
// sends no request twice, so those get 502. A client's own fault (a body
// shorter than its length: 400) does not count against the live server.
func TestServersThatDoNotAnswerAreSkipped(t *testing.T) {
	live := fwdtest.BodyReadingOrigin(t)
	var met atomic.Int64
	broken := fwdtest.RawBackend(t, func(c net.Conn) {
		if _, err := fwdtest.ReadRawHead(c); err == nil {
			met.Add(1)
		}
	})
	const requests = 10
	for _, kind := range []string{"http-reverse", "filter"} {
		for _, tc := range []struct {
			fail string
			want int64 // requests the broken server meets
		}{{"max_fails: 1, fail_timeout: 1h", 1}, {"max_fails: 0", requests / 2}} {
			t.Run(kind+"/"+tc.fail, func(t *testing.T) {
				// The short bodies go through a forwarder of their own:
				// one of them meets the broken server, which may close
				// before the proxy sees the body end, and so count
				// against it.
				f, addr := onlyListener(t, kind, tc.fail, broken, live)
				for range 2 {
					resp := fwdtest.ExchangeHalfClosed(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort")
					if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusBadGateway {
						t.Fatalf("a short body: %s, want 400 (or 502 from the broken server)", resp.Status)
					}
				}
				if got := skipped(f, kind, poolOf(kind), live); got != 0 {
					t.Fatalf("the live server skipped after a client's short body: %v", got)
				}
				_, addr = onlyListener(t, kind, tc.fail, broken, live)
				met.Store(0)
				ok := 0
				for range requests {
					if getStatus(t, addr) == http.StatusOK {
						ok++
					}
				}
				wantOK := requests
				if kind == "filter" {
					wantOK -= int(tc.want)
				}
				if got := met.Load(); got != tc.want || ok != wantOK {
					t.Errorf("the server that closes without answering met %d of %d GETs (%d answered 200), want %d (and %d)", got, requests, ok, tc.want, wantOK)
				}
			})
		}
	}
}

// TestRequestsThatCannotBeSentAgainAreNotRetried: a POST with a body,
// which went to the server that closed without answering, gets 502
// rather than going to the next server (its body is gone, and it may
// have been acted on); of two POSTs through two servers, one meets the
// broken server.
func TestRequestsThatCannotBeSentAgainAreNotRetried(t *testing.T) {
	broken := fwdtest.RawBackend(t, func(c net.Conn) { fwdtest.ReadRawHead(c) })
	_, addr := onlyListener(t, "http-reverse", "max_fails: 0", broken, fwdtest.BodyReadingOrigin(t))
	got := map[int]int{}
	for range 2 {
		got[fwdtest.ExchangeHalfClosed(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx").StatusCode]++
	}
	if got[http.StatusBadGateway] != 1 || got[http.StatusOK] != 1 {
		t.Errorf("two POSTs through a broken and a live server: %v, want one 502 and one 200", got)
	}
}

// onlyListener starts failoverListeners' listener name (tcp, filter,
// http-reverse) alone and returns the forwarder and its address.
func onlyListener(tb testing.TB, name, fail string, servers ...string) (*forwarder.Forwarder, string) {
	tb.Helper()
	for _, l := range failoverListeners(tb, fail, servers...) {
		if l.Name == name {
			f := fwdtest.Start(tb, l)
			return f, f.Addr(l.Name).String()
		}
	}
	tb.Fatalf("no %s listener", name)
	return nil, ""
}

// TestKeepAliveEndIsNoFailure: a server that closes each connection after
// its answer, without saying so (no "Connection: close"), leaves
// http-reverse and the filter a kept connection that is closed. A POST after a GET on one
// client connection goes to a new upstream connection and is answered,
// rather than meeting the closed one (502: a POST is not sent twice), and
// the server's keep-alive ending counts as no failure.
func TestKeepAliveEndIsNoFailure(t *testing.T) {
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	for _, kind := range []string{"http-reverse", "filter"} {
		t.Run(kind, func(t *testing.T) {
			f, addr := onlyListener(t, kind, "max_fails: 1, fail_timeout: 1h", up)
			c := fwdtest.DialFor(t, addr, 5*time.Second)
			r := bufio.NewReader(c)
			for i, raw := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"} {
				time.Sleep(50 * time.Millisecond) // the server's FIN arrives
				io.WriteString(c, raw)
				answeredOK(t, r, fmt.Sprintf("request %d (%.4s)", i+1, raw))
			}
			if got := fwdtest.Metric(f, "splicer_upstream_failures_total", "listener", kind, "pool", poolOf(kind), "server", up); got != 0 {
				t.Errorf("splicer_upstream_failures_total %v after the server's keep-alive ended, want 0", got)
			}
		})
	}
}

// TestHealthChecksOfUpstreamLists: a tcp listener (connect checks) and a
// filter listener (GET /health) check their upstream lists; once the dead
// server failed its check (splicer_upstream_healthy 0), 6 connections make
// 6 connects, none to it. With every server failing its check, a
// connection is closed without a connect.
func TestHealthChecksOfUpstreamLists(t *testing.T) {
	live, dead := fwdtest.HTTPOrigin(t), testenv.FreeAddr(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: tcp, listen: '127.0.0.1:0', proxy: tcp, engine: copy, upstream: ['%[1]s', '%[2]s'], max_fails: 0,
     health_check: {interval: 100ms, timeout: 100ms}}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, upstream: ['%[1]s', '%[2]s'], max_fails: 0,
     health_check: {path: /health, interval: 100ms, timeout: 100ms}}
  - {name: alldead, listen: '127.0.0.1:0', proxy: tcp, upstream: ['%[1]s'], health_check: {interval: 100ms, timeout: 100ms}}
`, dead, live)
	f := fwdtest.Start(t, cfg.Listeners...)
	healthy := func(l, server string) float64 {
		return fwdtest.Metric(f, "splicer_upstream_healthy", "listener", l, "pool", "upstream", "server", server)
	}
	testenv.Eventually(t, "the dead server failing its checks, the live one passing", func() bool {
		return healthy("tcp", dead) == 0 && healthy("filter", dead) == 0 && healthy("alldead", dead) == 0 &&
			healthy("tcp", live) == 1 && healthy("filter", live) == 1
	})
	for _, l := range []string{"tcp", "filter"} {
		t.Run(l, func(t *testing.T) {
			for i := range 6 {
				if got := getStatus(t, f.Addr(l).String()); got != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200 from the live server", i+1, got)
				}
			}
			if got := connects(t, f, l); got != 6 {
				t.Errorf("6 requests made %d connects, want 6: none to the server failing its checks", got)
			}
		})
	}
	t.Run("alldead", func(t *testing.T) {
		if got := getStatus(t, f.Addr("alldead").String()); got != 0 {
			t.Errorf("status %d with no healthy upstream, want the connection closed", got)
		}
		if got := connects(t, f, "alldead"); got != 0 {
			t.Errorf("%d connects with no healthy upstream, want none", got)
		}
		if got := fwdtest.Metric(f, "splicer_connections_closed_total", "listener", "alldead", "reason", "upstream_unreachable"); got != 1 {
			t.Errorf("closed with reason upstream_unreachable: %v, want 1", got)
		}
	})
}

// TestReloadKeepsWhatServersTaught: a reload that changes an http-reverse
// listener builds its pool afresh, yet a server skipped as dead stays
// skipped (its failure counted once) and one an operator drained stays
// drained: the 6 GETs after the reload all reach the one server left, and
// the dead one sees no connect.
func TestReloadKeepsWhatServersTaught(t *testing.T) {
	var served [2]atomic.Int64
	var live [2]string
	for i := range live {
		live[i] = fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) { served[i].Add(1) })
	}
	dead := testenv.FreeAddr(t)
	listener := func(idle string) config.Listener {
		cfg := fwdtest.Config(t, "listeners:\n"+revListener("rev", "servers: ['%s', '%s', '%s'], max_fails: 1, fail_timeout: 1h",
			", idle_timeout: %s, upstream_pool: {max_idle_per_server: 0}"), live[0], dead, live[1], idle)
		return cfg.Listeners[0]
	}
	f := fwdtest.Start(t, listener("1h"))
	for range 3 {
		getStatus(t, f.Addr("rev").String())
	}
	if got := skipped(f, "rev", "p", dead); got != 1 {
		t.Fatalf("the dead server not skipped after 3 GETs: %v", got)
	}
	if got := f.DrainUpstream("rev", "p", live[1], true); len(got) != 1 {
		t.Fatalf("DrainUpstream found %d servers, want 1", len(got))
	}

	cfg := config.Default()
	cfg.Listeners = []config.Listener{listener("2h")}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	before := connects(t, f, "rev")
	served[0].Store(0)
	served[1].Store(0)
	for i := range 6 {
		if code := getStatus(t, f.Addr("rev").String()); code != http.StatusOK {
			t.Fatalf("GET %d after the reload: %d", i+1, code)
		}
	}
	if a, b, c := served[0].Load(), served[1].Load(), connects(t, f, "rev")-before; a != 6 || b != 0 || c != 6 {
		t.Errorf("after the reload, 6 GETs: the live server served %d, the drained one %d, %d connects; want 6, 0, 6", a, b, c)
	}
	for _, u := range f.Upstreams() {
		if u.Server == dead && (!u.Skipped || u.Failures != 1) || u.Server == live[1] && !u.Drained {
			t.Errorf("after the reload: %+v", u)
		}
	}
}

// TestHealthCheckHost: a server that answers only for its name (404 to
// any other Host, as a virtual-host server without a default does) passes
// checks that send that name (health_check host) and fails those that
// send its address, the default.
func TestHealthCheckHost(t *testing.T) {
	var checked atomic.Int64
	up := fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) {
		checked.Add(1)
		if r.Host != "app.example" {
			http.NotFound(w, r)
		}
	})
	cfg := fwdtest.Config(t, "listeners:\n"+
		revListener("named", "servers: ['%[1]s'], health_check: {path: /health, host: app.example, interval: 100ms, timeout: 100ms}", "")+
		revListener("bare", "servers: ['%[1]s'], health_check: {path: /health, interval: 100ms, timeout: 100ms}", ""), up)
	f := fwdtest.Start(t, cfg.Listeners...)
	testenv.Eventually(t, "checks of both listeners", func() bool { return checked.Load() >= 6 })
	for _, u := range f.Upstreams() {
		if want := u.Listener == "named"; u.Healthy != want {
			t.Errorf("%s: healthy %v, want %v", u.Listener, u.Healthy, want)
		}
	}
}

// Lab test of http-reverse with engine ip: per-request splicing of response bodies on one keep-alive connection, unsplicing for each next request.

package httprev_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/proxy/httpcore/httprand"
)

// TestLabHTTPReverseIP: a keep-alive client sends 200 requests on one
// connection through http-reverse with engine ip, bodies from 1 KiB to
// 4 MiB, routed to two back-ends in turn, with engines.ip.min_body 0 so
// that ip takes every body it can. Every body arrives intact; ip splices
// every body of 1 MiB or more and declines only bodies that had already
// arrived whole at the forwarder (a shallower engine copies those);
// every splice ends at its limit, no unsplice fails, and /flows shows the
// connection moving between spliced (engine ip) and control.
func TestLabHTTPReverseIP(t *testing.T) { testReverseIP(t, 0, "ip", 0) }

// TestLabHTTPReverseAutoIsIP is TestLabHTTPReverseIP with engine auto and
// the default engines.ip.min_body, and a body of twice that among the
// others: auto tries ip first, so the bodies past min_body are spliced by
// ip; pipe takes the shorter ones from 512 KiB, and http-reverse copies
// the rest itself (ip would decline them all).
func TestLabHTTPReverseAutoIsIP(t *testing.T) {
	testReverseIP(t, 0, "auto", config.DefaultMinBody)
}

// TestLabHTTPReverseIPLossy is TestLabHTTPReverseIP with 1% loss both
// ways on both links: every body intact, no unsplice fails. The run
// takes 5-15 s here: a lost segment costs its sender a retransmission
// timeout (about 200 ms, the rebuilt sockets' too: they take an RTT
// sample at once), a lost SYN of a new upstream connection 1 s.
func TestLabHTTPReverseIPLossy(t *testing.T) { testReverseIP(t, 1, "ip", 0) }

func testReverseIP(t *testing.T, lossPercent float64, engine string, minBody config.Size) {
	l := httplab.New(t)
	if lossPercent > 0 {
		for _, link := range []lab.Link{l.ClientLink(), l.ServerLink()} {
			if err := l.SetLoss(link, lab.BothWays, lossPercent); err != nil {
				t.Fatal(err)
			}
		}
	}
	httplab.ServeOrigin(t, l, httplab.ServerAddr(l, portA), origin.WithName("a"))
	httplab.ServeOrigin(t, l, httplab.ServerAddr(l, portB), origin.WithName("b"))
	lc := httplab.Listener("rev-ip", httplab.FwdAddr(l, proxyPort), "http-reverse")
	lc.Engine = engine
	lc.Routes = []config.Route{{Pool: "ab"}}
	lc.Pools = []config.Pool{{Name: "ab", Balance: "round_robin", Servers: config.Servers(httplab.ServerAddr(l, portA), httplab.ServerAddr(l, portB))}}
	engines := config.Default().Engines
	engines.IP.MinBody = minBody
	f := httplab.StartWith(t, l, engines, lc)

	c := httplab.Dial(t, l, httplab.FwdAddr(l, proxyPort))
	c.SetDeadline(time.Now().Add(90 * time.Second))
	br := bufio.NewReader(c)
	states := sampleStates(t, f)
	sizes := []int64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 100 << 10, 2 << 10, 512 << 10}
	if top := 2 * int64(minBody); top > 4<<20 {
		sizes = append(sizes, top) // a body ip takes under a floor above the others
	}
	const requests = 200
	start := time.Now()
	last := ""
	large, eligible := 0, 0
	var slowest []string
	for i := range requests {
		size := sizes[i%len(sizes)]
		if size >= 1<<20 && size > int64(minBody) {
			// More than the forwarder's socket buffers hold, and past
			// the floor even without what came with its head.
			large++
		}
		if size >= int64(minBody) {
			eligible++ // long enough for ip under min_body
		}
		t0 := time.Now()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(size))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (/obj/%d): %v", i, size, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || sha256.Sum256(body) != origin.ObjectSHA256(size) {
			t.Fatalf("request %d: /obj/%d: %d bytes, %v, or wrong content", i, size, len(body), err)
		}
		name := resp.Header.Get("X-Origin-Name")
		if name == last || (name != "a" && name != "b") {
			t.Fatalf("request %d answered by %q after %q: want a and b in turn", i, name, last)
		}
		last = name
		if d := time.Since(t0); d > 100*time.Millisecond {
			slowest = append(slowest, fmt.Sprintf("%d:%d:%v", i, size, d.Round(time.Millisecond)))
		}
	}
	took := time.Since(start)
	seen := states()
	ip := f.Splices("ip", "limit")
	// A body whose server may send past the client's window is left to
	// the next engine (engine/ip windowsFit): the first bodies of a new
	// client connection, whose window is still small, now and then.
	refused := f.Metric("splicer_engine_events_total", "engine", "ip", "event", "window_refused")
	// Under loss a socket may hold segments past a hole, which ip leaves
	// to the next engine too (engine/ip outOfOrder).
	outOfOrder := f.Metric("splicer_engine_events_total", "engine", "ip", "event", "out_of_order_refused")
	if ip+refused+outOfOrder < float64(large) {
		t.Errorf("%v bodies spliced by ip, %v refused for their windows and %v for segments out of order, want at least the %d of 1 MiB or more (and min_body, %v)", ip, refused, outOfOrder, large, minBody)
	}
	if ip > float64(eligible) {
		t.Errorf("ip spliced %v bodies, more than the %d of at least engines.ip.min_body (%v): it took shorter ones", ip, eligible, minBody)
	}
	if refused > float64(large)/4 {
		t.Errorf("ip refused %v bodies for their windows, more than a quarter of the %d large ones", refused, large)
	}
	// The last body's splice may still be returning.
	testenv.Eventually(t, "every splice ended at its limit", func() bool { return f.SplicesEnded() == f.Spliced("limit") })
	if n := f.Metric("splicer_engine_events_total", "engine", "ip", "event", "unsplice_failed"); n != 0 {
		t.Errorf("%v unsplices failed", n)
	}
	for _, drop := range []string{"hold", "hold_dropped"} {
		if n := f.Metric("splicer_engine_events_total", "engine", "ip", "event", drop); n != 0 {
			t.Errorf("the datapath dropped %v segments as %s", n, drop)
		}
	}
	for _, line := range strings.Split(f.Logs.String(), "\n") {
		// Under loss the peer's answer to the timestamp probe may be lost.
		lostProbe := lossPercent > 0 && strings.Contains(line, "no answer to the timestamp probe")
		refusedWindow := strings.Contains(line, "the windows do not match")
		outOfOrder := lossPercent > 0 && strings.Contains(line, "holds out-of-order segments")
		short := minBody > 0 && strings.Contains(line, "below engine ip's minimum")
		if strings.Contains(line, "engine declined pair") && !strings.Contains(line, "already in the forwarder's receive queue") && !lostProbe && !refusedWindow && !outOfOrder && !short {
			t.Errorf("ip declined a body for another reason than having it whole already: %s", line)
		}
	}
	if n, want := f.Metric("splicer_unsplice_seconds", "engine", "ip"), f.Metric("splicer_engine_events_total", "engine", "ip", "event", "unsplices"); n == 0 || float64(n) != want {
		t.Errorf("splicer_unsplice_seconds{engine=ip} counted %v unsplices, the engine %v", n, want)
	}
	if !seen["spliced/ip"] || !seen["control/ip"] {
		t.Errorf("/flows showed %v; want the connection spliced by ip and back in control", seen)
	}
	t.Logf("%d requests in %v, %v bodies spliced by ip, %v by others; /flows states %v", requests, took, ip, f.Spliced("limit")-ip, seen)
	t.Logf("slowest: %v", slowest)
	for _, ev := range []string{"hold", "hold_dropped", "kept", "passed", "unsplices"} {
		t.Logf("ip %s: %v", ev, f.Metric("splicer_engine_events_total", "engine", "ip", "event", ev))
	}
}

// TestLabHTTPReverseIPPooled: with engine ip, a second client connection
// takes from the pool the upstream connection that ip spliced and
// unspliced for the first one (both clients announce the same MSS, so the
// connection is theirs to share), and ip splices a body on it again.
func TestLabHTTPReverseIPPooled(t *testing.T) {
	l := httplab.New(t)
	f := httplab.Start(t, l, newClientIPListener(t, l))
	// More than the forwarder's socket buffers, and than
	// engines.ip.min_body's default: ip splices it.
	const size = 2 * int64(config.DefaultMinBody)
	for i := range 2 {
		c := httplab.Dial(t, l, httplab.FwdAddr(l, proxyPort))
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(size))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || sha256.Sum256(body) != origin.ObjectSHA256(size) {
			t.Fatalf("client %d: %d bytes, %v, or wrong content", i, len(body), err)
		}
		c.Close()
		server := httplab.ServerAddr(l, portA)
		testenv.Eventually(t, "the upstream connection to wait in the pool", func() bool {
			return f.Metric("splicer_upstream_pool_idle", "listener", "rev-ip", "server", server) == 1
		})
	}
	server := httplab.ServerAddr(l, portA)
	if hit := f.Metric("splicer_upstream_pool_total", "listener", "rev-ip", "server", server, "result", "hit"); hit != 1 {
		t.Errorf("%v pool hits, want 1 (the second client on the first one's connection)", hit)
	}
	if n := f.Splices("ip", "limit"); n != 2 {
		t.Errorf("%v bodies spliced by ip, want 2", n)
	}
	if n := f.Metric("splicer_engine_events_total", "engine", "ip", "event", "unsplice_failed"); n != 0 {
		t.Errorf("%v unsplices failed", n)
	}
	for _, drop := range []string{"hold", "hold_dropped"} {
		if n := f.Metric("splicer_engine_events_total", "engine", "ip", "event", drop); n != 0 {
			t.Errorf("the datapath dropped %v segments as %s", n, drop)
		}
	}
}

// sampleStates polls /flows every millisecond until the returned function
// is called, which returns the state/engine pairs seen.
func sampleStates(t *testing.T, f *httplab.Forwarder) func() map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	stop := testenv.Every(t, time.Millisecond, func() {
		for _, fl := range f.Flows().Snapshot() {
			seen[fl.State+"/"+fl.Engine] = true
		}
	})
	return func() map[string]bool {
		stop()
		return seen
	}
}

// TestLabHTTPReverseIPRestartBinds: a body spliced and unspliced by ip
// leaves the client connection on a rebuilt socket. The forwarder shuts
// down and closes that idle keep-alive connection first, so its side
// waits in TIME_WAIT on the listener's port, and a forwarder started at
// once on the same address (a restart) must still bind it. The kernel
// clears SO_REUSEADDR when a socket leaves repair mode; the engine sets
// it again (tcprepair.repairOff).
func TestLabHTTPReverseIPRestartBinds(t *testing.T) {
	l := httplab.New(t)
	lc := newClientIPListener(t, l)
	engines := config.Default().Engines
	engines.IP.MinBody = 0
	f := httplab.StartWith(t, l, engines, lc)

	c := httplab.Dial(t, l, httplab.FwdAddr(l, proxyPort))
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	const size = 4 << 20
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", origin.ObjectPath(size))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || sha256.Sum256(body) != origin.ObjectSHA256(size) {
		t.Fatalf("%d bytes, %v, or wrong content", len(body), err)
	}
	testenv.Eventually(t, "the body's splice to end", func() bool { return f.Splices("ip", "limit") == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	f.Engines.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the client read %v after the shutdown, want EOF: the forwarder closes its idle connections", err)
	}
	c.Close()
	// The client's FIN reaches the forwarder's side, which enters
	// TIME_WAIT; then a new forwarder binds the listener's address, or
	// StartWith fails the test.
	time.Sleep(50 * time.Millisecond)
	httplab.StartWith(t, l, engines, lc)
}

// newClientIPListener serves origin "a" on l and returns an http-reverse
// listener with engine ip in front of it, for tests whose bodies go to
// new client connections. Such a connection's window is still about
// 64 KiB when the body starts: the upstream buffer (and window) is kept
// within it, or ip refuses the splice for the server's window
// (windowsFit).
func newClientIPListener(tb testing.TB, l *lab.Lab) config.Listener {
	tb.Helper()
	httplab.ServeOrigin(tb, l, httplab.ServerAddr(l, portA), origin.WithName("a"))
	lc := httplab.Listener("rev-ip", httplab.FwdAddr(l, proxyPort), "http-reverse")
	lc.Engine = "ip"
	lc.Routes = []config.Route{{Pool: "a"}}
	lc.Pools = []config.Pool{{Name: "a", Servers: config.Servers(httplab.ServerAddr(l, portA))}}
	rcvBuf := config.Size(32 << 10)
	lc.UpstreamPool = &config.UpstreamPool{ReceiveBuffer: &rcvBuf}
	return lc
}

// TestLabHTTPReverseIPRandom: httprand's random keep-alive exchanges
// (GET, HEAD, POST with a length or chunked; answers with a length,
// chunked or ending at close; bodies to 3 MiB; some pipelined) through
// http-reverse with engine auto and engines.ip.min_body 0, across links
// that lose 5% of segments both ways: every answer arrives as the
// back-end sent it, and ip spliced some of the bodies.
func TestLabHTTPReverseIPRandom(t *testing.T) {
	f, dial := randomIPLab(t, 5, nil)
	for seed := range uint64(httprand.Seeds()) {
		httprand.Run(t, dial(t), "", seed, 24)
	}
	if n := f.Splices("ip", "limit") + f.Splices("ip", "eof"); n == 0 {
		t.Error("ip spliced no body: the test did not reach it")
	}
	if n := f.Metric("splicer_engine_events_total", "engine", "ip", "event", "unsplice_failed"); n != 0 {
		t.Errorf("%v unsplices failed", n)
	}
	t.Logf("ip spliced %v bodies to their limit and %v to the end of the connection; others %v", f.Splices("ip", "limit"), f.Splices("ip", "eof"), f.SplicesEnded()-f.Splices("ip", "limit")-f.Splices("ip", "eof"))
}

// TestLabHTTPReverseIPAborts: through http-reverse with engine auto and
// engines.ip.min_body 0, across links losing 2% of segments both ways,
// clients that reset at a random point of an exchange (partway through
// the request, with it sent, partway through an answer ip may be
// splicing) run beside clients whose exchanges must arrive intact. No
// half-used upstream connection serves another client, and every pair
// ends: none is left spliced once its client has gone.
//
// An aborting client's reset is sent once and never retransmitted; when
// the lossy link drops it while the proxy waits for more of a head, a
// body or the next request, only that wait's timeout tells the proxy the
// client has gone. The waits are bounded at abortWait, well inside the
// 10 s the last check allows, so that a lost reset is not taken for a
// pair left open (a 2% loss seldom stalls a live exchange for one
// second, let alone five losses in a row of one segment: 6.2 s).
func TestLabHTTPReverseIPAborts(t *testing.T) {
	const abortWait = config.Duration(4 * time.Second)
	f, dial := randomIPLab(t, 2, &config.HTTP{HeaderTimeout: abortWait, BodyTimeout: abortWait, KeepaliveTimeout: abortWait})
	httprand.RunBesideAborts(t, dial, "", 12, 4)
	if n := f.Splices("ip", "limit") + f.Splices("ip", "eof") + f.Splices("ip", "reset"); n == 0 {
		t.Error("ip spliced no body: the test did not reach it")
	}
	testenv.Eventually(t, "no pair left open", func() bool { return f.Flows().Len() == 0 })
	t.Logf("ip splices by outcome: limit %v, eof %v, reset %v", f.Splices("ip", "limit"), f.Splices("ip", "eof"), f.Splices("ip", "reset"))
}

// randomIPLab is the random tests' lab: links losing lossPercent of
// segments both ways, httprand's back-end, and an http-reverse listener
// with engine auto, engines.ip.min_body 0 and the http section given (nil:
// the defaults) in front of it. dial(tb) connects a client to the
// listener, failing tb if it cannot.
func randomIPLab(t *testing.T, lossPercent float64, http *config.HTTP) (f *httplab.Forwarder, dial func(testing.TB) func() net.Conn) {
	t.Helper()
	l := httplab.New(t)
	for _, link := range []lab.Link{l.ClientLink(), l.ServerLink()} {
		if err := l.SetLoss(link, lab.BothWays, lossPercent); err != nil {
			t.Fatal(err)
		}
	}
	httplab.ServeRandom(t, l, httplab.ServerAddr(l, portA))
	lc := httplab.Listener("rev-ip", httplab.FwdAddr(l, proxyPort), "http-reverse")
	lc.Routes = []config.Route{{Pool: "a"}}
	lc.Pools = []config.Pool{{Name: "a", Servers: config.Servers(httplab.ServerAddr(l, portA))}}
	lc.HTTP = http
	engines := config.Default().Engines
	engines.IP.MinBody = 0
	f = httplab.StartWith(t, l, engines, lc)
	return f, func(tb testing.TB) func() net.Conn {
		return func() net.Conn { return httplab.Dial(tb, l, httplab.FwdAddr(l, proxyPort)) }
	}
}

// Lab tests of the control plane: pairs of real connections through a forwarder namespace, spliced by the Engine, with traffic, fallback, buffered bytes, cancel and idle (conformance_test.go runs the suite every engine passes).

package ip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// waitFor bounds every wait on the network; it only matters when a test is
// about to fail.
const waitFor = testenv.Wait

// engineLab is a lab with an Engine loaded in its forwarder namespace.
type engineLab struct {
	l    *lab.Lab
	e    *Engine
	port atomic.Uint32 // next forwarder/server port
	// upstreamRcvBuf, if set, bounds the forwarder's upstream sockets'
	// receive buffers, as the forwarder does for http-reverse (forwarder
	// upstreamRcvBuf): their servers may then send no more than a new
	// client connection's window takes (windowsFit).
	upstreamRcvBuf int
}

// limitedRcvBuf is the upstream receive buffer of the labs whose splices
// have byte limits: a window within a new client connection's, as the
// forwarder gives http-reverse's upstreams, so that windowsFit does not
// refuse a splice the test needs.
const limitedRcvBuf = 64 << 10

// newLimitedPair is a lab for splices with byte limits (upstream receive
// buffers of limitedRcvBuf) and a pair in it whose server end the test
// drives.
func newLimitedPair(tb testing.TB) (*engineLab, labPair) {
	tb.Helper()
	el := newEngineLab(tb, Options{MaxPairs: 16})
	el.upstreamRcvBuf = limitedRcvBuf
	return el, el.pair(tb, "")
}

func newEngineLab(tb testing.TB, opts Options) *engineLab {
	tb.Helper()
	return newEngineLabLogging(tb, opts, testenv.Logger(tb))
}

// newEngineLabLogging is newEngineLab with the engine logging to log.
func newEngineLabLogging(tb testing.TB, opts Options, log *slog.Logger) *engineLab {
	tb.Helper()
	l := lab.NewT(tb, lab.DefaultConfig())
	el := &engineLab{l: l, e: New(opts, log)}
	el.port.Store(7100)
	if err := l.Fwd.Do(el.e.Probe); err != nil {
		tb.Fatalf("Probe: %v", err)
	}
	tb.Cleanup(func() {
		if err := el.e.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return el
}

// labPair is a pair as a proxy holds it, with the peers' ends.
type labPair struct {
	p              *engine.Pair
	client, server *net.TCPConn // nil server when an origin serves the pair
}

// pair connects client -> forwarder -> server over IPv4 on fresh ports.
// With proto set, an origin serves the server side; otherwise the server
// end is returned for the test to drive.
func (el *engineLab) pair(tb testing.TB, proto origin.Proto) labPair {
	tb.Helper()
	return el.pairOf(tb, proto, false)
}

// pairOf is pair over IPv6 if v6.
func (el *engineLab) pairOf(tb testing.TB, proto origin.Proto, v6 bool) labPair {
	tb.Helper()
	port := uint16(el.port.Add(1))
	fwd, srv := el.l.Cfg.FwdClient.Addr(), el.l.Cfg.Server.Addr()
	if v6 {
		fwd, srv = el.l.Cfg.FwdClient6.Addr(), el.l.Cfg.Server6.Addr()
	}
	fwdAddr := netip.AddrPortFrom(fwd, port).String()
	srvAddr := netip.AddrPortFrom(srv, port).String()
	sln, err := el.l.Server.Listen("tcp", srvAddr)
	if err != nil {
		tb.Fatal(err)
	}
	var lp labPair
	accepted := make(chan *net.TCPConn, 1)
	if proto != "" {
		origintest.Serve(tb, sln, proto)
	} else {
		tb.Cleanup(func() { sln.Close() })
		go func() {
			c, err := sln.Accept()
			if err == nil {
				accepted <- c.(*net.TCPConn)
			}
			close(accepted)
		}()
	}
	fln, err := el.l.Fwd.Listen("tcp", fwdAddr)
	if err != nil {
		tb.Fatal(err)
	}
	defer fln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := el.l.Client.Dial(ctx, "tcp", fwdAddr)
	if err != nil {
		tb.Fatal(err)
	}
	lp.client = c.(*net.TCPConn)
	fa, err := fln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	fb, err := el.l.Fwd.Dial(sockopt.WithRcvBuf(ctx, el.upstreamRcvBuf), "tcp", srvAddr)
	if err != nil {
		tb.Fatal(err)
	}
	lp.p = engine.NewPair(uint64(port), "lab", fa.(*net.TCPConn))
	lp.p.SetUpstream(fb.(*net.TCPConn))
	if proto == "" {
		select {
		case lp.server = <-accepted:
		case <-ctx.Done():
			tb.Fatal("the server never accepted")
		}
	}
	for _, c := range []*net.TCPConn{lp.client, lp.server, lp.p.Client, lp.p.Upstream()} {
		if c != nil {
			tb.Cleanup(func() { c.Close() })
		}
	}
	return lp
}

// splice runs Splice in the background and waits until it either spliced
// the pair or returned; the result arrives on the returned channel.
func (el *engineLab) splice(tb testing.TB, ctx context.Context, lp labPair, opts engine.Options) <-chan spliceResult {
	tb.Helper()
	spliced := make(chan struct{})
	opts.OnSpliced = func() { close(spliced) }
	if opts.OnDetached == nil {
		opts.OnDetached = func() { lp.p.CloseConns() } // as the forwarder does
	}
	out := make(chan spliceResult, 1)
	go func() {
		r, err := el.e.Splice(ctx, lp.p, opts)
		out <- spliceResult{r, err}
	}()
	select {
	case <-spliced:
	case r := <-out:
		tb.Fatalf("Splice returned before splicing: %+v, %v", r.res, r.err)
	case <-time.After(waitFor):
		tb.Fatal("Splice neither spliced nor returned")
	}
	return out
}

type spliceResult struct {
	res engine.Result
	err error
}

// result waits for Splice to return and checks it ended with want.
func result(tb testing.TB, ch <-chan spliceResult, want engine.End) engine.Result {
	tb.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.res.End != want {
			tb.Fatalf("Splice returned %+v, %v; want end %v", r.res, r.err, want)
		}
		return r.res
	case <-time.After(waitFor):
		tb.Fatalf("Splice did not end with %v", want)
	}
	return engine.Result{}
}

// TestEngineStream64MiB: an idle pair spliced by the engine carries 64 MiB
// each way of the origin's stream protocol intact, ends with EndEOF once
// both FINs are acknowledged, and counts every byte. An IPv6 pair carries
// 8 MiB each way.
func TestEngineStream64MiB(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	t.Run("ipv4", func(t *testing.T) { testEngineStream(t, el, false, 64<<20) })
	t.Run("ipv6", func(t *testing.T) { testEngineStream(t, el, true, 8<<20) })
}

func testEngineStream(t *testing.T, el *engineLab, v6 bool, size int64) {
	lp := el.pairOf(t, origin.Stream, v6)
	start := time.Now()
	done := el.splice(t, context.Background(), lp, engine.Both(0))
	t.Logf("spliced in %v", time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := origin.StreamCheck(ctx, lp.client, size, size)
	if err != nil || !rep.OK() {
		t.Fatalf("%d bytes each way: %+v, %v", size, rep, err)
	}
	res := result(t, done, engine.EndEOF)
	// The stream protocol adds a 16-byte header up and a 32-byte digest down.
	want := [2]int64{size + 16, size + 32}
	if res.Moved != want || res.EOF != [2]bool{true, true} {
		t.Errorf("result moved %v, EOF %v; want %v, both", res.Moved, res.EOF, want)
	}
	if got := [2]int64{lp.p.Bytes(engine.Up), lp.p.Bytes(engine.Down)}; got != want {
		t.Errorf("pair counted %v, want %v", got, want)
	}
	el.checkDrops(t, "seq_out_of_window", "ack_out_of_window", "malformed", "mtu_exceeded", "rewrite_failed")
	c, _ := el.e.dp.Counters()
	d, _ := el.e.dp.Drops()
	t.Logf("datapath forwarded %d packets; drops %v", c["forwarded"], d)
}

// TestEngineFallbackMidStream: a pair handed over mid-stream, with bytes
// in its queues, falls back (or, should its queues happen to be empty at
// that instant, is spliced); either way 32 MiB each way arrive intact
// across the change and the pair counts every byte.
func TestEngineFallbackMidStream(t *testing.T) {
	const size = 32 << 20
	el := newEngineLab(t, Options{MaxPairs: 16})
	lp := el.pair(t, origin.Stream)
	pp := pipe.New(0)
	defer pp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checked := checkStreamAsync(ctx, lp.client, size)
	// Control mode until the stream runs at full speed.
	testenv.Eventually(t, "the stream under way", func() bool {
		r, err := pp.Splice(ctx, lp.p, engine.Options{For: 20 * time.Millisecond})
		if err != nil || r.End != engine.EndTimer {
			t.Fatalf("control mode: %+v, %v", r, err)
		}
		return lp.p.Bytes(engine.Up) > 1<<20 && lp.p.Bytes(engine.Down) > 1<<20
	})
	res, err := el.e.Splice(ctx, lp.p, engine.Both(0))
	if engine.IsFallback(err) {
		t.Logf("ip fell back: %v", err)
		res, err = pp.Splice(ctx, lp.p, engine.Both(0))
	} else {
		t.Log("ip spliced mid-stream")
	}
	if err != nil || res.End != engine.EndEOF {
		t.Fatalf("after the hand-over: %+v, %v", res, err)
	}
	if err := <-checked; err != nil {
		t.Fatal(err)
	}
	if got, want := [2]int64{lp.p.Bytes(engine.Up), lp.p.Bytes(engine.Down)}, [2]int64{size + 16, size + 32}; got != want {
		t.Errorf("pair counted %v, want %v", got, want)
	}
}

// TestEngineSpliceMidStream: pairs carrying the origin's stream protocol
// (size bytes each way at once) are forwarded by pipe in control mode for
// exactly K bytes up, K random, then spliced by ip with whatever the
// queues hold at that instant; both streams arrive intact (sha256), every
// pair ends with EndEOF and counts every byte. Short mode carries 32 MiB
// each way instead of 256.
func TestEngineSpliceMidStream(t *testing.T) {
	size := int64(256 << 20)
	if testing.Short() {
		size = 32 << 20
	}
	el := newEngineLab(t, Options{MaxPairs: 64})
	allSpliced(t, midStream(t, el, 20, 2, size, 0))
}

// allSpliced fails the test unless every pair of a lab without loss was
// spliced, but for one or two that fell back because the forwarder's
// socket held segments past a hole: a packet the busy host dropped (a
// full backlog; seen once in CI, with the client's SACK off), which the
// splice rightly refuses (outOfOrder) and no translation caused.
func allSpliced(tb testing.TB, m midStreamResult) {
	tb.Helper()
	if m.spliced+m.outOfOrder != m.pairs || m.outOfOrder > 2 {
		tb.Errorf("%d of %d pairs spliced, %d fell back for out-of-order segments", m.spliced, m.pairs, m.outOfOrder)
	}
}

// TestEngineSpliceMidStreamLossy is TestEngineSpliceMidStream with 1% of
// the packets lost each way on both links (whole GSO super-packets, as
// the lab drops them), 4 MiB each way per pair: the drain recovers its
// lost segments and every pair ends with EndEOF, streams intact, bytes
// counted exactly. A pair whose peer answers neither timestamp probe
// (the first or the one 510 ms later) falls back, to pipe here; at least
// 18 of 20 must be spliced (20 in each of 20 runs here).
func TestEngineSpliceMidStreamLossy(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 64})
	for _, link := range []lab.Link{el.l.ClientLink(), el.l.ServerLink()} {
		if err := el.l.SetLoss(link, lab.BothWays, 1); err != nil {
			t.Fatal(err)
		}
	}
	if m := midStream(t, el, 20, 4, 4<<20, 3*time.Second); m.spliced < 18 {
		t.Errorf("%d of 20 pairs spliced", m.spliced)
	}
}

// TestEngineSpliceMidStreamPlainClient: the client's stack has SACK,
// timestamps and window scaling turned off, the server's has them on.
// The forwarder's has timestamps off too: the datapath cannot add the
// option toward a server that negotiated it (CanTranslate). SACK blocks
// toward the client are blanked and windows rescaled; every pair is
// spliced and every stream arrives intact.
func TestEngineSpliceMidStreamPlainClient(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 64})
	for _, k := range []string{"net.ipv4.tcp_sack", "net.ipv4.tcp_timestamps", "net.ipv4.tcp_window_scaling"} {
		if err := el.l.Client.Sysctl(k, "0"); err != nil {
			t.Fatal(err)
		}
	}
	if err := el.l.Fwd.Sysctl("net.ipv4.tcp_timestamps", "0"); err != nil {
		t.Fatal(err)
	}
	allSpliced(t, midStream(t, el, 20, 4, 8<<20, 0))
}

// midStreamResult counts midStream's pairs: all, those ip spliced, and
// those that fell back because a socket held out-of-order segments.
type midStreamResult struct{ pairs, spliced, outOfOrder int }

// midStream runs pairs stream-protocol pairs, parallel at a time, each
// spliced by ip at a random offset, and returns how many ip spliced (the
// others fell back to pipe, which the test accepts only when the caller
// does). Pairs that had bytes to drain are logged.
func midStream(t *testing.T, el *engineLab, pairs, parallel int, size int64, idle time.Duration) midStreamResult {
	pp := pipe.New(0)
	defer pp.Close()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	offsets := make([]int64, pairs)
	for i := range offsets {
		offsets[i] = 16 + rng.Int64N(size*3/4)
	}
	drained0, bytes0 := el.e.counts.drainedPairs.Load(), el.e.counts.drainedBytes.Load()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var spliced, outOfOrder atomic.Int64
	for i, k := range offsets {
		lp := el.pair(t, origin.Stream)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ok, fellBack, err := spliceAt(t, el, pp, lp, size, k, idle)
			if err != nil {
				t.Errorf("pair %d spliced after %d bytes up: %v", i, k, err)
			}
			if ok {
				spliced.Add(1)
			}
			if fellBack != nil && strings.Contains(fellBack.Error(), "out-of-order segments") {
				outOfOrder.Add(1)
			}
		})
	}
	wg.Wait()
	drained := el.e.counts.drainedPairs.Load() - drained0
	t.Logf("%d of %d pairs spliced, %d had bytes to drain, %d bytes in all", spliced.Load(), pairs, drained, el.e.counts.drainedBytes.Load()-bytes0)
	if drained == 0 {
		t.Error("no pair had bytes buffered at splice time: the test did not test draining")
	}
	el.checkDrops(t, "malformed", "mtu_exceeded", "rewrite_failed")
	return midStreamResult{pairs: pairs, spliced: int(spliced.Load()), outOfOrder: int(outOfOrder.Load())}
}

// checkStreamAsync runs the client side of the stream protocol (size
// bytes each way) on c and sends its verdict on the returned channel.
func checkStreamAsync(ctx context.Context, c *net.TCPConn, size int64) <-chan error {
	checked := make(chan error, 1)
	go func() {
		rep, err := origin.StreamCheck(ctx, c, size, size)
		if err == nil && !rep.OK() {
			err = fmt.Errorf("stream arrived changed: %+v", rep)
		}
		checked <- err
	}()
	return checked
}

// spliceAt runs the stream protocol over lp: pipe forwards exactly k bytes
// up (and what it may down), then ip takes the pair over to the end, or, if
// it falls back, pipe does; it reports whether ip spliced, and why it fell
// back if it did.
func spliceAt(tb testing.TB, el *engineLab, pp *pipe.Engine, lp labPair, size, k int64, idle time.Duration) (spliced bool, fellBack, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checked := checkStreamAsync(ctx, lp.client, size)
	r, err := pp.Splice(ctx, lp.p, engine.Options{Up: engine.DirOptions{Limit: k}})
	if err != nil || r.End != engine.EndLimit || r.Moved[engine.Up] != k {
		return false, nil, fmt.Errorf("control mode: %+v, %v", r, err)
	}
	down := r.Moved[engine.Down]
	local, remote, err := tcprepair.Addrs(lp.p.Client)
	if err != nil {
		return false, nil, err
	}
	// A pair that stops moving while spliced has its state captured, for
	// the failure to explain itself.
	watch := el.watchStall(lp, datapath.Tuple{Src: remote, Dst: local})
	res, err := el.e.Splice(ctx, lp.p, engine.Both(idle))
	stall := watch.report()
	spliced = err == nil
	if engine.IsFallback(err) {
		tb.Logf("ip fell back after %d bytes down: %v", down, err)
		fellBack = err
		res, err = pp.Splice(ctx, lp.p, engine.Both(0))
	}
	if err != nil || res.End != engine.EndEOF {
		return spliced, fellBack, fmt.Errorf("after %d bytes down: %+v, %v%s", down, res, err, watch.explain(stall))
	}
	if err := <-checked; err != nil {
		return spliced, fellBack, fmt.Errorf("after %d bytes down: %w%s", down, err, watch.explain(stall))
	}
	if got, want := [2]int64{lp.p.Bytes(engine.Up), lp.p.Bytes(engine.Down)}, [2]int64{size + 16, size + 32}; got != want {
		return spliced, fellBack, fmt.Errorf("pair counted %v, want %v (%d bytes down before)%s", got, want, down, watch.explain(stall))
	}
	return spliced, fellBack, nil
}

// TestEngineManyPairs: 100 idle pairs spliced at once (sharing grace
// periods and the event reader) each echo a message, half-close, and end
// with EndEOF, leaving 100 pairs with both FINs acknowledged.
func TestEngineManyPairs(t *testing.T) {
	const n = 100
	el := newEngineLab(t, Options{MaxPairs: 2 * n})
	lps := make([]labPair, n)
	for i := range lps {
		lps[i] = el.pair(t, origin.Echo)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	results := make(chan error, n)
	for i, lp := range lps {
		go func() {
			res, err := el.e.Splice(ctx, lp.p, engine.Both(0))
			if err == nil && res.End != engine.EndEOF {
				err = fmt.Errorf("pair %d ended with %v", i, res.End)
			}
			results <- err
		}()
	}
	testenv.Eventually(t, "every pair spliced", func() bool { return len(el.e.dp.Pairs()) == n })
	var clients sync.WaitGroup
	for i, lp := range lps {
		clients.Go(func() {
			msg := fmt.Sprintf("pair %03d says hello", i)
			lp.client.Write([]byte(msg))
			lp.client.CloseWrite()
			lp.client.SetReadDeadline(time.Now().Add(waitFor))
			if got, err := io.ReadAll(lp.client); string(got) != msg || err != nil {
				t.Errorf("pair %d: sent %q, got back %q, %v", i, msg, got, err)
			}
		})
	}
	clients.Wait()
	for range n {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	// Both FINs were acknowledged: TIME_WAIT, or closed by a reset from a
	// peer that already closed answering a late segment (a window probe's
	// answer delayed under load, see README.md), which still ended as EOF.
	for _, a := range el.e.dp.Pairs() {
		if st, err := el.e.dp.Lookup(a); err != nil || !st.Up.FINAcked || !st.Down.FINAcked {
			t.Errorf("pair %v: phase %v (%+v), %v; want both FINs acknowledged", a, st.Phase, st, err)
		}
	}
}

// checkDrops fails if the datapath dropped anything for one of reasons.
func (el *engineLab) checkDrops(tb testing.TB, reasons ...string) {
	tb.Helper()
	drops, err := el.e.dp.Drops()
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range reasons {
		if drops[r] != 0 {
			tb.Errorf("%d packets dropped as %s", drops[r], r)
		}
	}
}

// TestEngineSplicesBufferedData: bytes the forwarder acknowledged but the
// proxy never read (in either socket's receive queue) are delivered by the
// engine after splicing, before the bytes sent later; the engine reports
// draining until they are acknowledged, then done, and counts them.
func TestEngineSplicesBufferedData(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	for _, from := range []engine.Direction{engine.Up, engine.Down} {
		t.Run("sent by "+map[engine.Direction]string{engine.Up: "client", engine.Down: "server"}[from], func(t *testing.T) {
			lp := el.pair(t, "")
			src, dst := lp.client, lp.server
			if from == engine.Down {
				src, dst = dst, src
			}
			early := bytes.Repeat([]byte("sent before the splice; "), 4000)
			if _, err := src.Write(early); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, "the early bytes in the forwarder's receive queue", func() bool {
				n, err := engine.Readable(lp.p.Src(from))
				return err == nil && n == len(early)
			})
			var draining, drained atomic.Bool
			opts := engine.Both(0)
			opts.OnDraining = func(d bool) {
				if d {
					draining.Store(true)
				} else {
					drained.Store(true)
				}
			}
			done := el.splice(t, context.Background(), lp, opts)
			late := []byte(" and after")
			src.Write(late)
			src.CloseWrite()
			if got := testenv.ReadAll(t, dst); string(got) != string(early)+string(late) {
				t.Fatalf("after the splice %d bytes arrived, want %d", len(got), len(early)+len(late))
			}
			testenv.Eventually(t, "the engine reporting the drain done", drained.Load)
			if !draining.Load() {
				t.Error("the engine never reported draining")
			}
			dst.Write([]byte("answer"))
			dst.CloseWrite()
			if got := testenv.ReadAll(t, src); string(got) != "answer" {
				t.Fatalf("the answer arrived as %q", got)
			}
			res := result(t, done, engine.EndEOF)
			if res.Moved[from] != int64(len(early)+len(late)) {
				t.Errorf("moved %v, want %d bytes %v", res.Moved, len(early)+len(late), from)
			}
		})
	}
}

// TestEngineFallsBackWithoutClockAnswer: when the client never answers the
// timestamp probe (everything toward the forwarder is lost), Splice falls
// back after its timeout, and the connections work on as before once the
// link heals.
func TestEngineFallsBackWithoutClockAnswer(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	el.e.clocks.probe = [2]bool{true, true} // the sockets' own record of the clocks would spare the probe
	lp := el.pair(t, "")
	link := el.l.ClientLink()
	if err := el.l.SetLoss(link, lab.TowardServer, 100); err != nil {
		t.Fatal(err)
	}
	_, err := el.e.Splice(context.Background(), lp.p, engine.Both(0))
	if err := el.l.SetLoss(link, lab.TowardServer, 0); err != nil {
		t.Fatal(err)
	}
	if !engine.IsFallback(err) || !strings.Contains(err.Error(), "no answer to the timestamp probe") {
		t.Fatalf("Splice without the client's answer returned %v, want a fallback naming the probe", err)
	}
	el.workOnAfterFallback(t, lp)
}

// workOnAfterFallback checks that a Splice that fell back left nothing in
// the datapath, then forwards lp in user space, as the next engine would,
// and echoes a message each way through it.
func (el *engineLab) workOnAfterFallback(tb testing.TB, lp labPair) {
	tb.Helper()
	if pairs := el.e.dp.Pairs(); len(pairs) != 0 {
		tb.Errorf("the datapath still holds %v", pairs)
	}
	go copyThenClose(lp.p.Upstream(), lp.p.Client)
	go copyThenClose(lp.p.Client, lp.p.Upstream())
	echoOnce(tb, lp)
}

// sendFromClient sends IPv4 packets (IP header included) to dst from a
// raw socket in the client's namespace, as a forger there would.
func (el *engineLab) sendFromClient(tb testing.TB, dst netip.Addr, pkts ...[]byte) {
	tb.Helper()
	err := el.l.Client.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, pkt := range pkts {
			if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func copyThenClose(dst, src *net.TCPConn) {
	io.Copy(dst, src)
	dst.CloseWrite()
}

// TestEngineCancel: cancelling the context ends the splice with EndCancel
// and removes the pair from the datapath; both peers are reset at once.
func TestEngineCancel(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	lp := el.pair(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := el.splice(t, ctx, lp, engine.Both(0))
	echoOnce(t, lp)
	cancel()
	res := result(t, done, engine.EndCancel)
	if res.Moved != [2]int64{5, 5} {
		t.Errorf("moved %v, want 5 each way", res.Moved)
	}
	if pairs := el.e.dp.Pairs(); len(pairs) != 0 {
		t.Errorf("the datapath still holds %v after cancel", pairs)
	}
	// The engine reset both peers: neither needs to send anything to
	// learn that the pair is gone.
	for name, c := range map[string]*net.TCPConn{"client": lp.client, "server": lp.server} {
		c.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("the %s read %v after the cancel, want ECONNRESET", name, err)
		}
	}
}

// TestEngineIdle: a pair that moves no byte for IdleTimeout ends with
// EndIdle and leaves the datapath.
func TestEngineIdle(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	lp := el.pair(t, "")
	done := el.splice(t, context.Background(), lp, engine.Both(300*time.Millisecond))
	echoOnce(t, lp)
	result(t, done, engine.EndIdle)
	if pairs := el.e.dp.Pairs(); len(pairs) != 0 {
		t.Errorf("the datapath still holds %v after the idle timeout", pairs)
	}
}

// echoOnce sends five bytes each way through a spliced pair.
func echoOnce(tb testing.TB, lp labPair) {
	tb.Helper()
	for _, c := range [][2]*net.TCPConn{{lp.client, lp.server}, {lp.server, lp.client}} {
		if _, err := c[0].Write([]byte("hello")); err != nil {
			tb.Fatal(err)
		}
		if got := testenv.ReadFull(tb, c[1], 5); string(got) != "hello" {
			tb.Fatalf("read %q", got)
		}
	}
}

// TestEngineFallsBackForLocalPeer: a pair whose client is on the
// forwarder's own host never crosses a device, so Splice declines it.
func TestEngineFallsBackForLocalPeer(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	fwdAddr := netip.AddrPortFrom(el.l.Cfg.FwdClient.Addr(), 7099).String()
	ln, err := el.l.Fwd.Listen("tcp", fwdAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := el.l.Fwd.Dial(ctx, "tcp", fwdAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fa, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	p := engine.NewPair(1, "lab", fa.(*net.TCPConn))
	p.SetUpstream(c.(*net.TCPConn)) // any second connection: the client is checked first
	_, err = el.e.Splice(ctx, p, engine.Both(0))
	if !engine.IsFallback(err) || !strings.Contains(err.Error(), "on this host") {
		t.Fatalf("Splice of a local pair returned %v, want a fallback naming the local peer", err)
	}
}

// TestEngineFallsBackForOtherNamespace: a socket outside the namespace
// the engine was loaded in (the client's own end here, a socket of the
// client namespace) is declined before anything is held, with either
// namespace check (cookie, or inode on kernels without cookies), and the
// pair works on.
func TestEngineFallsBackForOtherNamespace(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	for _, byCookie := range []bool{true, false} {
		if !byCookie {
			el.e.home.cookie = 0
		} else if el.e.home.cookie == 0 {
			t.Log("the kernel has no namespace cookies: the inode check only")
			continue
		}
		lp := el.pair(t, "")
		p := engine.NewPair(1, "lab", lp.client)
		p.SetUpstream(lp.p.Upstream())
		_, err := el.e.Splice(context.Background(), p, engine.Both(0))
		if !engine.IsFallback(err) || !strings.Contains(err.Error(), "another network namespace") {
			t.Fatalf("by cookie %v: Splice of a socket of another namespace returned %v, want a fallback naming it", byCookie, err)
		}
		if pairs := el.e.dp.Pairs(); len(pairs) != 0 {
			t.Errorf("by cookie %v: the datapath holds %v", byCookie, pairs)
		}
	}
}

// TestEngineSupports: limits, watches, holds and timers are accepted
// (unsplicing gives the pair back); a limit too large for one limit
// sequence number and a pair without upstream are refused.
func TestEngineSupports(t *testing.T) {
	e := New(Options{}, nil)
	p := engine.NewPair(1, "t", nil)
	p.SetUpstream(&net.TCPConn{})
	for _, tc := range []struct {
		name string
		opts engine.Options
		ok   bool
	}{
		{"both ways", engine.Both(time.Minute), true},
		{"limits", engine.Options{Up: engine.DirOptions{Limit: 10}, Down: engine.DirOptions{Limit: 20}}, true},
		{"limit and watch", engine.Options{Up: engine.DirOptions{Limit: 10}, Down: engine.DirOptions{Mode: engine.Watch}}, true},
		{"limit and hold", engine.Options{Up: engine.DirOptions{Mode: engine.Hold}, Down: engine.DirOptions{Limit: 10}}, true},
		{"timer", engine.Options{For: time.Second}, true},
		{"limit of 4 GiB", engine.Options{Up: engine.DirOptions{Limit: 10}, Down: engine.DirOptions{Limit: 4 << 30}}, false},
		// The FIN would end the splice half-closed, which TCP_REPAIR cannot rebuild.
		{"to EOF beside a limit", engine.Options{Up: engine.DirOptions{Limit: 10}}, false},
		{"to EOF beside watch", engine.Options{Down: engine.DirOptions{Mode: engine.Watch}}, false},
		{"to EOF beside hold", engine.Options{Up: engine.DirOptions{Mode: engine.Hold}}, false},
	} {
		if err := e.Supports(p, tc.opts); (err == nil) != tc.ok {
			t.Errorf("%s: Supports = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	if err := e.Supports(engine.NewPair(2, "t", nil), engine.Both(0)); err == nil {
		t.Error("Supports accepted a pair without upstream")
	}
}

// TestEngineSupportsMinLimit: with Options.MinLimit, a limit below it is
// declined (for the next engine), one at it and splices without a limit
// are not.
func TestEngineSupportsMinLimit(t *testing.T) {
	e := New(Options{MinLimit: 512 << 10}, nil)
	p := engine.NewPair(1, "t", nil)
	p.SetUpstream(&net.TCPConn{})
	held := engine.DirOptions{Mode: engine.Hold}
	for _, tc := range []struct {
		name string
		opts engine.Options
		ok   bool
	}{
		{"body below the minimum", engine.Options{Up: held, Down: engine.DirOptions{Limit: 512<<10 - 1}}, false},
		{"request body below the minimum", engine.Options{Up: engine.DirOptions{Limit: 100}, Down: held}, false},
		{"body at the minimum", engine.Options{Up: held, Down: engine.DirOptions{Limit: 512 << 10}}, true},
		{"both ways to the FIN", engine.Both(0), true},
	} {
		err := e.Supports(p, tc.opts)
		if (err == nil) != tc.ok {
			t.Errorf("%s: Supports = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "engines.ip.min_body") {
			t.Errorf("%s: %v does not name the key that sets the minimum", tc.name, err)
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(n)}).Read(b)
	return b
}

// Lab tests of unsplicing: byte-limited and watched splices of one connection pair, back to control mode and spliced again, streams intact; a client reset mid-body.

package ip

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
)

// streams records both directions' bytes as their senders wrote and
// their receivers read them.
type streams struct {
	sentDown, readDown, sentUp, readUp hash.Hash
}

func newStreams() *streams {
	return &streams{sha256.New(), sha256.New(), sha256.New(), sha256.New()}
}

func (s *streams) check(tb testing.TB) {
	tb.Helper()
	if string(s.sentDown.Sum(nil)) != string(s.readDown.Sum(nil)) {
		tb.Error("the client read another byte stream than the server wrote")
	}
	if string(s.sentUp.Sum(nil)) != string(s.readUp.Sum(nil)) {
		tb.Error("the server read another byte stream than the client wrote")
	}
}

// writeAsync writes b on c in the background; the error arrives on the
// returned channel.
func writeAsync(c *net.TCPConn, b []byte) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		ch <- err
	}()
	return ch
}

// readN reads exactly n bytes from c within waitFor.
func readN(tb testing.TB, c *net.TCPConn, n int) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(waitFor))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	if got, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("read %d of %d bytes: %v", got, n, err)
	}
	return b
}

// relay moves n bytes from src to dst by hand, as a proxy in control mode.
func relay(tb testing.TB, src, dst *net.TCPConn, n int) {
	tb.Helper()
	if _, err := dst.Write(readN(tb, src, n)); err != nil {
		tb.Fatalf("relay: %v", err)
	}
}

// send writes b from one peer and reads it at the other end.
func (s *streams) send(tb testing.TB, from, to *net.TCPConn, b []byte, sent, read hash.Hash) {
	tb.Helper()
	done := writeAsync(from, b)
	read.Write(readN(tb, to, len(b)))
	if err := <-done; err != nil {
		tb.Fatalf("write: %v", err)
	}
	sent.Write(b)
}

// TestEngineUnspliceCycles: one pair spliced 100 times (20 over IPv6), alternately until
// exactly N bytes of the server's stream went through (Limit on Down,
// Watch on Up), sometimes with more bytes behind the limit, and until the
// client sent data (Watch); after each splice the test moves a few bytes
// each way through the forwarder's own connections, as a proxy in control
// mode would. Both streams arrive intact, and every splice ended in
// control mode.
func TestEngineUnspliceCycles(t *testing.T) {
	// Every splice takes a table slot, which a removed pair frees only
	// after a second: room for a second's worth of cycles.
	el := newEngineLab(t, Options{MaxPairs: 256})
	el.upstreamRcvBuf = limitedRcvBuf
	t.Run("ipv4", func(t *testing.T) { testUnspliceCycles(t, el, false, 100) })
	t.Run("ipv6", func(t *testing.T) { testUnspliceCycles(t, el, true, 20) })
}

func testUnspliceCycles(t *testing.T, el *engineLab, v6 bool, cycles int) {
	lp := el.pairOf(t, "", v6)
	fc, fu := lp.p.Client, lp.p.Upstream()
	s := newStreams()
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	before := len(el.e.UnspliceTimes())
	start := time.Now()
	for i := range cycles {
		if i%3 == 2 {
			watchCycle(t, el, lp, s, rng)
		} else {
			limitCycle(t, el, lp, s, rng, i%4 == 1)
		}
		// Control mode: a few bytes each way through the proxy's sockets.
		ping := fmt.Appendf(nil, "ping %d", i)
		done := writeAsync(lp.client, ping)
		relay(t, fc, fu, len(ping))
		s.sentUp.Write(ping)
		s.readUp.Write(readN(t, lp.server, len(ping)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		pong := fmt.Appendf(nil, "pong %d", i)
		done = writeAsync(lp.server, pong)
		relay(t, fu, fc, len(pong))
		s.sentDown.Write(pong)
		s.readDown.Write(readN(t, lp.client, len(pong)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s.check(t)
	times := el.e.UnspliceTimes()[before:]
	if len(times) != cycles {
		t.Errorf("%d unsplices recorded, want %d", len(times), cycles)
	}
	if n := el.e.counts.unsplices.failed.Load(); n != 0 {
		t.Errorf("%d unsplices failed", n)
	}
	t.Logf("%d cycles in %v; unsplice p50 %v", cycles, time.Since(start), median(times))
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// limitCycle splices until exactly n bytes of the server's stream went
// through; with extra, the server sends more behind them, which the
// proxy then relays in control mode.
func limitCycle(t *testing.T, el *engineLab, lp labPair, s *streams, rng *rand.Rand, extra bool) {
	t.Helper()
	n := 1 + rng.IntN(256<<10)
	more := 0
	if extra {
		more = 1 + rng.IntN(4000)
	}
	opts := engine.Options{Down: engine.DirOptions{Mode: engine.Forward, Limit: int64(n)}, Up: engine.DirOptions{Mode: engine.Watch}}
	ch := el.splice(t, context.Background(), lp, opts)
	body := rngBytes(rng, n+more)
	done := writeAsync(lp.server, body)
	s.readDown.Write(readN(t, lp.client, n))
	r := result(t, ch, engine.EndLimit)
	if r.Dir != engine.Down || r.Moved[engine.Down] != int64(n) {
		t.Fatalf("limit of %d: %+v", n, r)
	}
	if more > 0 {
		relay(t, lp.p.Upstream(), lp.p.Client, more)
		s.readDown.Write(readN(t, lp.client, more))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.sentDown.Write(body)
}

// watchCycle splices with no limit reached until the client sends again.
func watchCycle(t *testing.T, el *engineLab, lp labPair, s *streams, rng *rand.Rand) {
	t.Helper()
	opts := engine.Options{Down: engine.DirOptions{Mode: engine.Forward, Limit: maxLimit - 1}, Up: engine.DirOptions{Mode: engine.Watch}}
	ch := el.splice(t, context.Background(), lp, opts)
	s.send(t, lp.server, lp.client, rngBytes(rng, 1+rng.IntN(64<<10)), s.sentDown, s.readDown)
	req := rngBytes(rng, 1+rng.IntN(1000))
	done := writeAsync(lp.client, req)
	r := result(t, ch, engine.EndData)
	if r.Dir != engine.Up {
		t.Fatalf("watch: %+v", r)
	}
	relay(t, lp.p.Client, lp.p.Upstream(), len(req))
	s.readUp.Write(readN(t, lp.server, len(req)))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.sentUp.Write(req)
}

func rngBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestEngineUnspliceClientReset: the client resets in the middle of a
// byte-limited body. The splice ends with EndReset, the server sees the
// reset, and nothing hangs.
func TestEngineUnspliceClientReset(t *testing.T) {
	el, lp := newLimitedPair(t)
	opts := engine.Options{Down: engine.DirOptions{Mode: engine.Forward, Limit: 1 << 20}, Up: engine.DirOptions{Mode: engine.Watch}}
	ch := el.splice(t, context.Background(), lp, opts)
	if _, err := lp.server.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	readN(t, lp.client, 64<<10)
	lp.client.SetLinger(0)
	lp.client.Close() // a reset: linger 0
	result(t, ch, engine.EndReset)
	lp.server.SetReadDeadline(time.Now().Add(waitFor))
	_, err := lp.server.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("server read after the client's reset: %v, want ECONNRESET", err)
	}
}

// TestEngineUnspliceTimer: a splice with For forwards both ways until the
// timer fires, then gives the pair back (EndTimer) with whatever was in
// flight delivered; control mode carries on, and a second timed splice
// works on the same pair. Streams intact.
func TestEngineUnspliceTimer(t *testing.T) {
	el, lp := newLimitedPair(t)
	s := newStreams()
	rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	for round := range 2 {
		ch := el.splice(t, context.Background(), lp, engine.Options{For: 300 * time.Millisecond})
		for range 4 {
			s.send(t, lp.client, lp.server, rngBytes(rng, 1+rng.IntN(128<<10)), s.sentUp, s.readUp)
			s.send(t, lp.server, lp.client, rngBytes(rng, 1+rng.IntN(128<<10)), s.sentDown, s.readDown)
		}
		r := result(t, ch, engine.EndTimer)
		if r.Moved[engine.Up] == 0 || r.Moved[engine.Down] == 0 {
			t.Errorf("round %d: %+v, want bytes moved both ways", round, r)
		}
		msg := fmt.Appendf(nil, "control %d", round)
		done := writeAsync(lp.client, msg)
		relay(t, lp.p.Client, lp.p.Upstream(), len(msg))
		s.sentUp.Write(msg)
		s.readUp.Write(readN(t, lp.server, len(msg)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s.check(t)
}

// TestEngineUnspliceServerCloses: the server closes before the limit (a
// body cut short). The FIN reaches the client; the pair, which cannot be
// rebuilt half-closed, runs to its end: the client's FIN reaches the
// server and the splice ends with EndEOF.
func TestEngineUnspliceServerCloses(t *testing.T) {
	el, lp := newLimitedPair(t)
	opts := engine.Options{Down: engine.DirOptions{Mode: engine.Forward, Limit: 1 << 20}, Up: engine.DirOptions{Mode: engine.Hold}}
	ch := el.splice(t, context.Background(), lp, opts)
	body := make([]byte, 10000)
	if _, err := lp.server.Write(body); err != nil {
		t.Fatal(err)
	}
	lp.server.CloseWrite()
	lp.client.SetReadDeadline(time.Now().Add(waitFor))
	got, err := io.ReadAll(lp.client)
	if err != nil || len(got) != len(body) {
		t.Fatalf("client read %d bytes, %v; want %d then EOF", len(got), err, len(body))
	}
	lp.client.CloseWrite()
	lp.server.SetReadDeadline(time.Now().Add(waitFor))
	if n, err := lp.server.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("server read %d, %v after the client's FIN; want EOF", n, err)
	}
	r := result(t, ch, engine.EndEOF)
	if r.Moved[engine.Down] != int64(len(body)) {
		t.Errorf("moved %v, want %d down", r.Moved, len(body))
	}
}

// Package enginetest is the conformance suite every engine passes: exact bytes both ways, half-close, reset, limits, watch, idle and timer.
//
// An engine's test calls Run(t, engine); the pairs are real TCP connections
// on loopback in the test's own network namespace. Where engines may
// differ, each is held to the Contract declared for it: no subtest skips
// because an engine declined an option.
package enginetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
)

// Conns is one spliceable pair with the far ends the test drives: Client
// talks to the pair's client side, Server to its upstream side.
type Conns struct {
	Pair   *engine.Pair
	Client *net.TCPConn // the client application's socket
	Server *net.TCPConn // the origin server's socket
}

// NewPair connects a client to a forwarder socket and the forwarder to a
// server, on loopback, and returns the pair in control mode.
func NewPair(tb testing.TB) *Conns {
	tb.Helper()
	fwdClient, client := testenv.TCPPair(tb)
	fwdUp, server := testenv.TCPPair(tb)
	p := engine.NewPair(1, "test", fwdClient)
	p.SetUpstream(fwdUp)
	return &Conns{Pair: p, Client: client, Server: server}
}

// Random returns n bytes of seeded random data; every bit of seed counts,
// so streams drawn from different seeds differ.
func Random(n int, seed uint64) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// SpliceAsync runs e.Splice in the background and returns a channel with its result.
func SpliceAsync(tb testing.TB, e engine.Engine, p *engine.Pair, opts engine.Options) <-chan engine.Result {
	tb.Helper()
	ch := make(chan engine.Result, 1)
	go func() {
		res, err := e.Splice(context.Background(), p, opts)
		if err != nil {
			tb.Errorf("Splice: %v", err)
		}
		ch <- res
	}()
	return ch
}

// Wait returns the result of a SpliceAsync, failing tb if the splice does
// not end within a minute.
func Wait(tb testing.TB, ch <-chan engine.Result) engine.Result {
	tb.Helper()
	return WaitWithin(tb, ch, 60*time.Second)
}

// WaitWithin returns the result of a SpliceAsync, failing tb if the splice
// does not end within d.
func WaitWithin(tb testing.TB, ch <-chan engine.Result, d time.Duration) engine.Result {
	tb.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		tb.Fatalf("splice did not end within %v", d)
	}
	return engine.Result{}
}

// timerSlack is how long past Options.For a splice with nothing else to
// end it may take to end, on a loaded machine: a splice still running
// then did not honour its timer.
const timerSlack = 15 * time.Second

// NewPairFunc makes one pair in control mode for a test, with the far ends
// the test drives. NewPair (loopback in the test's namespace) is the default.
type NewPairFunc func(tb testing.TB) *Conns

// Option changes how Run builds the pairs it splices.
type Option func(*suite)

// WithPairs makes Run build every pair with f: an engine that cannot splice
// loopback pairs (ip needs real devices) passes pairs through a lab.
func WithPairs(f NewPairFunc) Option { return func(s *suite) { s.newPair = f } }

// suite is one engine under test, the contract it is held to, and where
// its pairs come from.
type suite struct {
	e        engine.Engine
	newPair  NewPairFunc
	contract *Contract // WithContract's, else the one declared for e's name
	c        Contract  // the contract in force
}

// Run runs the conformance suite against e.
func Run(t *testing.T, e engine.Engine, opts ...Option) {
	s := &suite{e: e, newPair: NewPair}
	for _, o := range opts {
		o(s)
	}
	c, err := s.contractOf()
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	t.Run("BothWays", func(t *testing.T) { s.testBothWays(t, 16<<20) })
	t.Run("HalfCloseUp", func(t *testing.T) { s.testHalfClose(t, engine.Up) })
	t.Run("HalfCloseDown", func(t *testing.T) { s.testHalfClose(t, engine.Down) })
	t.Run("ResetFromClient", func(t *testing.T) { s.testReset(t, engine.Up) })
	t.Run("ResetFromServer", func(t *testing.T) { s.testReset(t, engine.Down) })
	t.Run("LimitThenControl", s.testLimit)
	t.Run("WatchBesideLimit", func(t *testing.T) { s.testWatch(t, 1<<20) })
	t.Run("WatchBesideFIN", func(t *testing.T) { s.testWatch(t, 0) })
	t.Run("Idle", s.testIdle)
	t.Run("Cancel", s.testCancel)
	t.Run("TimerKeepsBytes", s.testTimer)
	t.Run("TimerWithAPeerNotReading", s.testTimerStalled)
	t.Run("TimerWithASlowPeer", s.testTimerSlow)
	t.Run("ResplicedAfterFIN", s.testResplicedAfterFIN)
}

// testBothWays sends n random bytes each way at once and compares digests.
func (s *suite) testBothWays(t *testing.T, n int) {
	c := s.newPair(t)
	res := SpliceAsync(t, s.e, c.Pair, engine.Both(0))
	up, down := Random(n, 1), Random(n, 2)
	gotUp, gotDown := make(chan [32]byte, 1), make(chan [32]byte, 1)
	go SendThenClose(t, c.Client, up)
	go SendThenClose(t, c.Server, down)
	go func() { gotUp <- DigestAll(t, c.Server) }()
	go func() { gotDown <- DigestAll(t, c.Client) }()
	if <-gotUp != sha256.Sum256(up) {
		t.Error("upstream received a different byte stream than the client sent")
	}
	if <-gotDown != sha256.Sum256(down) {
		t.Error("client received a different byte stream than the server sent")
	}
	r := Wait(t, res)
	if r.End != engine.EndEOF || r.Moved[engine.Up] != int64(n) || r.Moved[engine.Down] != int64(n) {
		t.Errorf("result = %+v, want EOF with %d bytes each way", r, n)
	}
	if c.Pair.Bytes(engine.Up) != int64(n) || c.Pair.Bytes(engine.Down) != int64(n) {
		t.Errorf("pair counters up=%d down=%d, want %d", c.Pair.Bytes(engine.Up), c.Pair.Bytes(engine.Down), n)
	}
}

// SendThenClose writes b to c, then closes c's write side (a FIN after every byte).
func SendThenClose(tb testing.TB, c *net.TCPConn, b []byte) {
	if _, err := c.Write(b); err != nil {
		tb.Errorf("write: %v", err)
	}
	c.CloseWrite()
}

// DigestAll reads c to EOF and returns the sha256 of what it read.
func DigestAll(tb testing.TB, c *net.TCPConn) [32]byte {
	h := sha256.New()
	if _, err := io.Copy(h, c); err != nil {
		tb.Errorf("read: %v", err)
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// ends returns the far end that sends in direction d, and the one that
// receives.
func (c *Conns) ends(d engine.Direction) (from, to *net.TCPConn) {
	if d == engine.Down {
		return c.Server, c.Client
	}
	return c.Client, c.Server
}

// testHalfClose closes one side's write half: the other side sees EOF after
// every byte, and can still send its answer the other way.
func (s *suite) testHalfClose(t *testing.T, d engine.Direction) {
	c := s.newPair(t)
	res := SpliceAsync(t, s.e, c.Pair, engine.Both(0))
	closer, peer := c.ends(d)
	msg := Random(100000, 3)
	SendThenClose(t, closer, msg)
	got, err := io.ReadAll(peer)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("peer read %d bytes (err %v), want the %d bytes sent before the FIN", len(got), err, len(msg))
	}
	answer := []byte("answer after half-close")
	SendThenClose(t, peer, answer)
	got, err = io.ReadAll(closer)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("half-closed side read %q (err %v), want %q", got, err, answer)
	}
	if r := Wait(t, res); r.End != engine.EndEOF || !r.EOF[engine.Up] || !r.EOF[engine.Down] {
		t.Errorf("result = %+v, want EOF both ways", r)
	}
}

// testReset resets one side: the other side sees a reset, not a clean EOF.
func (s *suite) testReset(t *testing.T, d engine.Direction) {
	c := s.newPair(t)
	res := SpliceAsync(t, s.e, c.Pair, engine.Both(0))
	resetter, peer := c.ends(d)
	if _, err := resetter.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(peer, buf); err != nil {
		t.Fatalf("byte before the reset was not delivered: %v", err)
	}
	engine.ResetConn(resetter)
	r := Wait(t, res)
	if r.End != engine.EndReset {
		t.Errorf("end = %v, want reset", r.End)
	}
	// As the forwarder does when a splice ends the pair: engines never
	// close a pair's sockets, they arm the reset.
	c.Pair.CloseConns()
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := peer.Read(buf)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("peer read after reset: %v, want ECONNRESET", err)
	}
}

// testLimit forwards exactly N bytes down, gives control back, and checks
// that the bytes past N are still on the upstream socket, in order.
func (s *suite) testLimit(t *testing.T) {
	c := s.newPair(t)
	const n, extra = 300000, 5000
	data := Random(n+extra, 4)
	go c.Server.Write(data)
	opts := engine.Options{Up: engine.DirOptions{Mode: engine.Hold}, Down: engine.DirOptions{Mode: engine.Forward, Limit: n}}
	s.require(t, c.Pair, opts, true, "a byte limit")
	res := SpliceAsync(t, s.e, c.Pair, opts)
	got := make([]byte, n)
	if _, err := io.ReadFull(c.Client, got); err != nil {
		t.Fatal(err)
	}
	r := Wait(t, res)
	if r.End != engine.EndLimit || r.Dir != engine.Down || r.Moved[engine.Down] != n {
		t.Fatalf("result = %+v, want limit down after %d bytes", r, n)
	}
	if !bytes.Equal(got, data[:n]) {
		t.Fatal("client received different bytes before the limit")
	}
	rest := make([]byte, extra)
	c.Pair.Upstream().SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c.Pair.Upstream(), rest); err != nil || !bytes.Equal(rest, data[n:]) {
		t.Fatalf("bytes past the limit not left on the upstream socket intact (err %v)", err)
	}
	c.Client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if k, _ := c.Client.Read(make([]byte, 1)); k != 0 {
		t.Fatal("engine forwarded bytes past the limit")
	}
}

// require checks that the engine supports opts for p when declared (every
// engine, or its contract, says it must) and declines them when not, so
// that a change in what the engine supports fails the suite. It reports
// whether the splice is to be run.
func (s *suite) require(t *testing.T, p *engine.Pair, opts engine.Options, declared bool, what string) bool {
	t.Helper()
	err := s.e.Supports(p, opts)
	switch {
	case declared && err != nil:
		t.Fatalf("engine %s declines %s, which it must support: %v", s.e.Name(), what, err)
	case !declared && err == nil:
		t.Fatalf("engine %s supports %s, which its contract does not declare: update the contract", s.e.Name(), what)
	case !declared:
		t.Logf("engine %s declines %s, as its contract says: %v", s.e.Name(), what, err)
	}
	return declared
}

// testWatch forwards down, up to limit (0: to its FIN), while watching
// up; data from the client ends the splice and stays readable for the
// proxy. Every engine watches beside a limit, as the HTTP proxies do;
// beside a FIN only where its contract says so.
func (s *suite) testWatch(t *testing.T, limit int64) {
	c := s.newPair(t)
	opts := engine.Options{Up: engine.DirOptions{Mode: engine.Watch}, Down: engine.DirOptions{Mode: engine.Forward, Limit: limit}}
	what, declared := "a watch beside a limit", true
	if limit == 0 {
		what, declared = "a watch beside a direction forwarded to its FIN", s.c.WatchBesideFIN
	}
	if !s.require(t, c.Pair, opts, declared, what) {
		return
	}
	res := SpliceAsync(t, s.e, c.Pair, opts)
	c.Server.Write([]byte("response"))
	got := make([]byte, 8)
	if _, err := io.ReadFull(c.Client, got); err != nil || string(got) != "response" {
		t.Fatalf("down not forwarded while watching up: %q %v", got, err)
	}
	c.Client.Write([]byte("next request"))
	r := Wait(t, res)
	if r.End != engine.EndData || r.Dir != engine.Up {
		t.Fatalf("result = %+v, want data up", r)
	}
	req := make([]byte, 12)
	c.Pair.Client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c.Pair.Client, req); err != nil || string(req) != "next request" {
		t.Fatalf("watched data not left for the proxy: %q %v", req, err)
	}
}

func (s *suite) testIdle(t *testing.T) {
	c := s.newPair(t)
	opts := engine.Both(200 * time.Millisecond)
	start := time.Now()
	r := Wait(t, SpliceAsync(t, s.e, c.Pair, opts))
	if r.End != engine.EndIdle {
		t.Fatalf("end = %v, want idle", r.End)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Fatal("idle timeout fired early")
	}
}

func (s *suite) testCancel(t *testing.T) {
	c := s.newPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan engine.Result, 1)
	go func() { r, _ := s.e.Splice(ctx, c.Pair, engine.Both(0)); ch <- r }()
	c.Client.Write([]byte("ping"))
	io.ReadFull(c.Server, make([]byte, 4))
	cancel()
	if r := Wait(t, ch); r.End != engine.EndCancel {
		t.Fatalf("end = %v, want cancel", r.End)
	}
}

// testTimer ends a splice by Options.For while bytes flow up and checks that
// splicing again continues the stream with no byte lost or repeated. The
// client closes only once the first splice ended, so nothing but the timer
// can end it (it has no idle timeout); the server closes once it has read
// everything, so the second splice ends at both FINs.
func (s *suite) testTimer(t *testing.T) {
	c := s.newPair(t)
	data := Random(8<<20, 5)
	firstEnded := make(chan struct{})
	go func() {
		if _, err := c.Client.Write(data); err != nil {
			t.Errorf("write: %v", err)
		}
		select {
		case <-firstEnded:
			c.Client.CloseWrite()
		case <-t.Context().Done():
		}
	}()
	got := make(chan [32]byte, 1)
	go func() {
		got <- DigestAll(t, c.Server)
		c.Server.CloseWrite()
	}()
	opts := engine.Options{For: 20 * time.Millisecond}
	r := WaitWithin(t, SpliceAsync(t, s.e, c.Pair, opts), opts.For+timerSlack)
	close(firstEnded)
	if r.End != engine.EndTimer {
		t.Fatalf("end = %v (%v), want timer: nothing else could end the splice", r.End, r.Err)
	}
	if r = Wait(t, SpliceAsync(t, s.e, c.Pair, engine.Options{})); r.End != engine.EndEOF {
		t.Fatalf("second splice ended %v, want EOF", r.End)
	}
	if <-got != sha256.Sum256(data) {
		t.Fatal("stream changed across a timer end and a second splice")
	}
}

// testTimerStalled ends a splice by Options.For while the server sends far
// more than the buffers hold to a client that reads nothing. An engine
// that lets its writes finish when a timer ends the splice must not wait
// for that client past the idle timeout: the splice returns idle with
// engine.ErrStalledWrite (bytes were read that cannot be written), or at
// the timer if the engine keeps every byte without waiting. An idle end
// without ErrStalledWrite is the idle timeout's own: the timer never
// ended the splice.
func (s *suite) testTimerStalled(t *testing.T) {
	c := s.newPair(t)
	go c.Server.Write(Random(64<<20, 7)) // ends with the pair's close
	const idle = time.Second
	start := time.Now()
	opts := engine.Both(idle)
	opts.For = 50 * time.Millisecond
	r := Wait(t, SpliceAsync(t, s.e, c.Pair, opts))
	stalled := r.End == engine.EndIdle && errors.Is(r.Err, engine.ErrStalledWrite)
	if r.End != engine.EndTimer && !stalled {
		t.Fatalf("end = %v (%v), want timer, or idle from a write stalled after the timer's end", r.End, r.Err)
	}
	if took := time.Since(start); took > opts.For+idle+2*time.Second {
		t.Fatalf("the splice took %v to end, past its timer (%v) and idle timeout (%v)", took, opts.For, idle)
	}
}

// testTimerSlow is testTimerStalled with a client that reads slowly but
// steadily: a write it takes longer than the idle timeout to finish is
// not idle, and the stream arrives whole across a second splice.
func (s *suite) testTimerSlow(t *testing.T) {
	c := s.newPair(t)
	data := Random(4<<20, 8)
	go SendThenClose(t, c.Server, data)
	got := make(chan []byte, 1)
	go func() {
		var b []byte
		buf := make([]byte, 16<<10)
		c.Client.SetReadDeadline(time.Now().Add(time.Minute))
		for {
			n, err := c.Client.Read(buf) // about 1.6 MB/s
			b = append(b, buf[:n]...)
			if err != nil {
				c.Client.CloseWrite() // both directions end
				got <- b
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	opts := engine.Both(300 * time.Millisecond)
	opts.For = 50 * time.Millisecond
	r := WaitWithin(t, SpliceAsync(t, s.e, c.Pair, opts), opts.For+timerSlack)
	if r.End != engine.EndTimer {
		t.Fatalf("end = %v (%v), want timer: a slow client is not idle, and the stream takes seconds", r.End, r.Err)
	}
	if r = Wait(t, SpliceAsync(t, s.e, c.Pair, engine.Both(0))); r.End != engine.EndEOF {
		t.Fatalf("second splice ended %v (%v), want EOF", r.End, r.Err)
	}
	if b := <-got; sha256.Sum256(b) != sha256.Sum256(data) {
		t.Fatalf("client got %d bytes, not the %d sent", len(b), len(data))
	}
}

// testResplicedAfterFIN ends a splice by Options.For after it forwarded the
// client's FIN, lets the server answer with its own FIN (which closes the
// upstream socket for good), and splices again: the second splice must end
// at both FINs, not report a reset for the FIN it already forwarded. An
// engine whose contract lacks TimerAfterFIN (ip, which cannot give such a
// pair back) keeps the pair spliced instead: then the server's FIN must
// end the first splice at EOF.
func (s *suite) testResplicedAfterFIN(t *testing.T) {
	c := s.newPair(t)
	data := Random(64<<10, 6)
	spliced := make(chan struct{})
	opts := engine.Options{For: 300 * time.Millisecond, OnSpliced: func() { close(spliced) }}
	first := SpliceAsync(t, s.e, c.Pair, opts)
	<-spliced // the FIN must reach a spliced pair: ip declines one already past it
	got := make(chan [32]byte, 1)
	go func() { got <- DigestAll(t, c.Server) }()
	SendThenClose(t, c.Client, data)
	if <-got != sha256.Sum256(data) {
		t.Fatal("upstream received a different byte stream than the client sent")
	}
	if s.c.TimerAfterFIN {
		s.respliceAfterTimer(t, c, first, opts.For)
	} else {
		s.keptPastFIN(t, c, first, opts.For)
	}
	c.Client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read after the server's FIN = %d, %v; want EOF", n, err)
	}
}

// respliceAfterTimer is testResplicedAfterFIN for an engine whose timer
// ends a splice past a FIN: the first splice ends at its timer, and a
// second one (which the engine may not decline) ends at both FINs.
func (s *suite) respliceAfterTimer(t *testing.T, c *Conns, first <-chan engine.Result, timer time.Duration) {
	t.Helper()
	if r := WaitWithin(t, first, timer+timerSlack); r.End != engine.EndTimer || !r.EOF[engine.Up] {
		t.Fatalf("first splice = %+v, want a timer end after the client's FIN", r)
	}
	c.Server.CloseWrite()
	time.Sleep(100 * time.Millisecond) // the server's FIN reaches the forwarder
	r, err := s.e.Splice(context.Background(), c.Pair, engine.Options{})
	if err != nil || r.End != engine.EndEOF {
		t.Fatalf("second splice ended %v (%v, %v), want EOF", r.End, r.Err, err)
	}
}

// keptPastFIN is testResplicedAfterFIN for an engine that keeps a pair
// spliced past a FIN until both FINs: its timer does not end the first
// splice, and the server's FIN does, at EOF.
func (s *suite) keptPastFIN(t *testing.T, c *Conns, first <-chan engine.Result, timer time.Duration) {
	t.Helper()
	select {
	case r := <-first:
		t.Fatalf("splice past the client's FIN ended %+v before the server's FIN; its contract keeps it until both FINs", r)
	case <-time.After(timer + 2*time.Second):
	}
	c.Server.CloseWrite()
	if r := Wait(t, first); r.End != engine.EndEOF {
		t.Fatalf("splice kept past the client's FIN ended %v (%v), want EOF", r.End, r.Err)
	}
}

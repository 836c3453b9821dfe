// Tests of Pair: the FIN bookkeeping engines share across splices, and no FIN for a reset.

package engine_test

import (
	"errors"
	"io"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/enginetest"
)

// TestForwardFINOncePerUpstream checks that a FIN forwarded up is not
// forwarded again to the same upstream, but is to a new one (an HTTP proxy
// that took another connection from its pool).
func TestForwardFINOncePerUpstream(t *testing.T) {
	c := enginetest.NewPair(t)
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, c.Server)
	c.Server.CloseWrite()
	time.Sleep(50 * time.Millisecond) // the server's FIN closes the forwarder's socket
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatalf("second FIN to the same upstream: %v, want nothing done", err)
	}

	next := enginetest.NewPair(t)
	c.Pair.SetUpstream(next.Pair.Upstream())
	if err := c.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, next.Server)
}

func expectEOF(tb testing.TB, c interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		tb.Fatalf("read = %d, %v; want EOF", n, err)
	}
}

// TestForwardFINNotForAReset: a read EOF on a client connection that a
// reset closed (a write had taken the kernel's report of the reset) is
// no FIN: ForwardFIN answers ECONNRESET and the server hears nothing,
// where a client's real FIN goes on.
func TestForwardFINNotForAReset(t *testing.T) {
	c := enginetest.NewPair(t)
	engine.ResetConn(c.Client)
	c.Pair.Client.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The first read takes the reset's error; the next one finds EOF, what
	// a reader sees when a writer took the error first.
	if _, err := c.Pair.Client.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("first read after the reset: %v, want ECONNRESET", err)
	}
	if n, err := c.Pair.Client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("second read after the reset: %d, %v; want EOF", n, err)
	}
	if err := c.Pair.ForwardFIN(engine.Up); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("ForwardFIN after a reset: %v, want ECONNRESET", err)
	}
	c.Server.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Server.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server read %v, want nothing (no FIN)", err)
	}

	fin := enginetest.NewPair(t)
	fin.Client.CloseWrite()
	expectEOF(t, fin.Pair.Client)
	if err := fin.Pair.ForwardFIN(engine.Up); err != nil {
		t.Fatalf("ForwardFIN after the client's FIN: %v", err)
	}
	expectEOF(t, fin.Server)
}

// TestForgetConnsKeepsAddresses: a pair whose sockets an engine
// detached drops its closed client connection and still names the
// client, the address it reached and its upstream, as /flows and the
// logs show them.
func TestForgetConnsKeepsAddresses(t *testing.T) {
	c := enginetest.NewPair(t)
	remote, local := c.Pair.Client.RemoteAddr().String(), c.Pair.Client.LocalAddr().String()
	upstream := c.Pair.Upstream().RemoteAddr().String()
	if err := c.Pair.CloseConns(); err != nil {
		t.Fatal(err)
	}
	c.Pair.SetUpstream(nil)
	c.Pair.ForgetConns()
	if c.Pair.Client != nil {
		t.Error("the pair still holds its closed client connection")
	}
	if got := c.Pair.ClientAddr().String(); got != remote {
		t.Errorf("ClientAddr = %s, want %s", got, remote)
	}
	if got := c.Pair.ClientLocalAddr().String(); got != local {
		t.Errorf("ClientLocalAddr = %s, want %s", got, local)
	}
	if got := c.Pair.UpstreamAddr().String(); got != upstream {
		t.Errorf("UpstreamAddr = %s, want %s", got, upstream)
	}
}

// TestHeapPerForgottenPair: what a pair keeps once ForgetConns dropped
// its sockets (an idle pair spliced by ip, for its life): its record
// with the addresses kept as values, 288 bytes, at most 320 of heap. A
// fresh *net.TCPAddr per address took about 370.
func TestHeapPerForgottenPair(t *testing.T) {
	const n = 4000
	c := enginetest.NewPair(t)
	up := c.Pair.Upstream()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	pairs := make([]*engine.Pair, n)
	before := heap()
	for i := range pairs {
		// The sockets are shared: ForgetConns drops them from the pair
		// without closing them.
		p := engine.NewPair(uint64(i), "test", c.Pair.Client)
		p.SetUpstream(up)
		p.SetUpstream(nil)
		p.ForgetConns()
		pairs[i] = p
	}
	per := float64(int64(heap())-int64(before)) / n
	t.Logf("%.0f bytes of heap per pair with its sockets forgotten", per)
	if per > 320 {
		t.Errorf("a pair keeps %.0f bytes of heap once its sockets are forgotten: want at most 320", per)
	}
	if got, want := pairs[n-1].UpstreamAddr().String(), up.RemoteAddr().String(); got != want {
		t.Errorf("UpstreamAddr = %s, want %s", got, want)
	}
	runtime.KeepAlive(pairs)
}

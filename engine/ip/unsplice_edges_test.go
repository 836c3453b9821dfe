// Lab tests of unsplicing at its edges: more kept bytes than the rebuilt socket takes, a receiver's lost bytes whose retransmission runs past the limit, a FIN as the timer fires.

package ip

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestEngineUnspliceKeepsMoreThanTheSocketTakes: while a client's request
// body is spliced up to its limit, the server answers early, and the
// client's window (grown on an earlier download) lets it send far more
// than the forwarder's upstream socket can queue: its receive buffer was
// made small after the handshake, so its window scale allows far more
// than the buffer holds (as happens when the program keeps segments one
// by one, each taking more memory than its bytes). Unsplicing queues what
// the socket takes and leaves the rest to the server's retransmission:
// the splice ends at the limit, and the whole answer reaches the client
// in control mode. Before, filling the rebuilt socket failed with ENOBUFS
// and both peers were reset (TestLabHTTPReverseIPRandom, a POST answered
// early).
func TestEngineUnspliceKeepsMoreThanTheSocketTakes(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	lp := el.pair(t, "")
	s := newStreams()
	// A download in control mode first, so the client's window grows far
	// past what the upstream socket takes.
	grow(t, lp.client, 8<<20)
	download := bytes.Repeat([]byte("download"), 1<<20)
	relayed := make(chan error, 1)
	go func() {
		_, err := io.CopyN(lp.p.Client, lp.p.Upstream(), int64(len(download)))
		relayed <- err
	}()
	s.send(t, lp.server, lp.client, download, s.sentDown, s.readDown)
	if err := <-relayed; err != nil {
		t.Fatal(err)
	}
	const rcvBuf = 64 << 10
	if err := lp.p.Upstream().SetReadBuffer(rcvBuf); err != nil {
		t.Fatal(err)
	}

	const body, answer = 1 << 20, 4 << 20
	upload := engine.Options{Up: engine.DirOptions{Mode: engine.Forward, Limit: body}, Down: engine.DirOptions{Mode: engine.Hold}}
	ch := el.splice(t, context.Background(), lp, upload)
	early := rngBytesOf(7, answer)
	answered := writeAsync(lp.server, early)
	// The body's segments carry the client's window to the server.
	req := rngBytesOf(8, body)
	s.send(t, lp.client, lp.server, req[:body/2], s.sentUp, s.readUp)
	kept := waitKept(t, el, engine.Down, 4*rcvBuf)
	t.Logf("the program kept %d bytes of the early answer", kept)
	s.send(t, lp.client, lp.server, req[body/2:], s.sentUp, s.readUp)
	r := result(t, ch, engine.EndLimit)
	if r.Dir != engine.Up || r.Moved[engine.Up] != body {
		t.Fatalf("upload: %+v", r)
	}
	got := readAsync(lp.client, answer)
	relay(t, lp.p.Upstream(), lp.p.Client, answer)
	if b := <-got; !bytes.Equal(b, early) {
		t.Errorf("the client read %d bytes of another answer than the server wrote (%d bytes)", len(b), answer)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	s.check(t)
}

// TestEngineUnspliceRetransmissionPastTheLimit: the last, short segment
// of a limited body is lost on its way to the client, and the server has
// already sent more behind it (the program keeps that, past the limit).
// The server's retransmission of the short segment carries the bytes
// after it too (Linux merges small segments when it retransmits them), so
// it starts below the limit and ends past it: the program keeps it whole.
// The engine sends the client the lost bytes from that kept copy, and the
// splice ends at the limit with every byte delivered. Before, the client
// never got them and unsplicing failed after quietTimeout.
func TestEngineUnspliceRetransmissionPastTheLimit(t *testing.T) {
	el, lp := newLimitedPair(t)
	const first, last, more = 20000, 383, 1000
	opts := engine.Options{Down: engine.DirOptions{Mode: engine.Forward, Limit: first + last}, Up: engine.DirOptions{Mode: engine.Hold}}
	ch := el.splice(t, context.Background(), lp, opts)
	stream := rngBytesOf(9, first+last+more)
	if _, err := lp.server.Write(stream[:first]); err != nil {
		t.Fatal(err)
	}
	readN(t, lp.client, first)

	link := el.l.ClientLink()
	if err := el.l.SetLoss(link, lab.TowardClient, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := lp.server.Write(stream[first : first+last]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // its own segment, forwarded and lost
	if _, err := lp.server.Write(stream[first+last:]); err != nil {
		t.Fatal(err)
	}
	waitKept(t, el, engine.Down, more)
	if err := el.l.SetLoss(link, lab.TowardClient, 0); err != nil {
		t.Fatal(err)
	}

	if got := readN(t, lp.client, last); !bytes.Equal(got, stream[first:first+last]) {
		t.Fatal("the client read other bytes than the limit's last ones")
	}
	r := result(t, ch, engine.EndLimit)
	if r.Moved[engine.Down] != first+last {
		t.Errorf("moved %v, want %d down", r.Moved, first+last)
	}
	done := readAsync(lp.client, more)
	relay(t, lp.p.Upstream(), lp.p.Client, more)
	if b := <-done; !bytes.Equal(b, stream[first+last:]) {
		t.Errorf("the client read %d bytes past the limit, not the %d the server wrote", len(b), more)
	}
}

// readAsync reads n bytes from c in the background, within waitFor; what
// it read, all or part, arrives on the returned channel.
func readAsync(c *net.TCPConn, n int) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(waitFor))
		defer c.SetReadDeadline(time.Time{})
		b := make([]byte, n)
		got, _ := io.ReadFull(c, b)
		ch <- b[:got]
	}()
	return ch
}

// waitKept waits until the program kept at least n bytes of direction d
// of the lab's only spliced pair, and returns how many.
func waitKept(tb testing.TB, el *engineLab, d engine.Direction, n int) int {
	tb.Helper()
	have := 0
	testenv.Eventually(tb, fmt.Sprintf("the program to keep %d bytes %v", n, d), func() bool {
		pairs := el.e.dp.Pairs()
		if len(pairs) != 1 {
			return false
		}
		k, err := el.e.dp.Kept(pairs[0], d)
		if err != nil {
			tb.Fatal(err)
		}
		have = 0
		for _, s := range k.Segs {
			have += len(s.Data)
		}
		return have >= n
	})
	return have
}

// grow sets c's receive buffer to n bytes, past net.core.rmem_max.
func grow(tb testing.TB, c *net.TCPConn, n int) {
	tb.Helper()
	err := sockopt.WithFD(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) })
	if err != nil {
		tb.Fatal(err)
	}
}

// rngBytesOf is n random bytes from seed.
func rngBytesOf(seed uint64, n int) []byte {
	return rngBytes(rand.New(rand.NewPCG(seed, seed)), n)
}

// TestEngineUnspliceTimerMeetsAFIN: the server closes its direction as a
// timed splice's timer fires, and its FIN is forwarded before the watch
// takes hold. A half-closed pair cannot be rebuilt, so it runs to its end,
// as after a FIN forwarded earlier: the client's last bytes and FIN reach
// the server, and the splice ends with EndEOF. Before, unsplicing failed
// and reset both peers.
func TestEngineUnspliceTimerMeetsAFIN(t *testing.T) {
	el, lp := newLimitedPair(t)
	closed := make(chan error, 1)
	el.e.hook = func(stage string) {
		if stage != "quiescing" {
			return
		}
		lp.server.CloseWrite()
		// The FIN has passed the program once the client reads it.
		lp.client.SetReadDeadline(time.Now().Add(waitFor))
		_, err := lp.client.Read(make([]byte, 1))
		closed <- err
	}
	t.Cleanup(func() { el.e.hook = nil })
	ch := el.splice(t, context.Background(), lp, engine.Options{For: 100 * time.Millisecond})
	if err := <-closed; err != io.EOF {
		t.Fatalf("the client read %v after the server's FIN, want EOF", err)
	}
	last := []byte("the client's last words")
	if _, err := lp.client.Write(last); err != nil {
		t.Fatal(err)
	}
	lp.client.CloseWrite()
	lp.server.SetReadDeadline(time.Now().Add(waitFor))
	if got, err := io.ReadAll(lp.server); err != nil || !bytes.Equal(got, last) {
		t.Fatalf("the server read %q, %v; want %q and EOF", got, err, last)
	}
	r := result(t, ch, engine.EndEOF)
	if r.Moved[engine.Up] != int64(len(last)) {
		t.Errorf("moved %v, want %d up", r.Moved, len(last))
	}
}

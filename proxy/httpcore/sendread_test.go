// Tests of sendThenRead: the write inside the raw read, its answer, and its failures.

package httpcore

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
)

func newSendReader(tb testing.TB, c *net.TCPConn, pair *engine.Pair) *idleReader {
	tb.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	return &idleReader{dl: &idleDeadline{conn: c}, rc: rc, pair: pair}
}

func TestSendThenRead(t *testing.T) {
	a, b := testenv.TCPPair(t)
	r := newSendReader(t, a, nil)
	go func() {
		buf := make([]byte, 5)
		io.ReadFull(b, buf)
		b.Write(append(buf, '!'))
	}()
	r.send = []byte("hello")
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(r, buf, 6)
	if err != nil || string(buf[:n]) != "hello!" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	if r.send != nil {
		t.Fatal("send left pending")
	}
}

func TestSendThenReadPeerGone(t *testing.T) {
	a, b := testenv.TCPPair(t)
	r := newSendReader(t, a, nil)
	b.Close()
	r.send = []byte("hello")
	_, err := r.Read(make([]byte, 16))
	if err == nil {
		t.Fatal("no error from a closed peer")
	}
	if !isStale(err) {
		t.Fatalf("%v: not what a stale connection gives", err)
	}
}

// TestSendThenReadDeadline: a deadline that ends the wait at once (a
// shutdown's) still lets the pending bytes go.
func TestSendThenReadDeadline(t *testing.T) {
	a, b := testenv.TCPPair(t)
	r := newSendReader(t, a, nil)
	a.SetReadDeadline(time.Unix(1, 0))
	r.send = []byte("hello")
	if _, err := r.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("peer got %q, %v", buf, err)
	}
}

// TestSendThenReadTwoParts: send and send2 leave in order, in one
// sendmsg when the socket takes them, and in ordinary writes for what it
// does not take at once (a second part larger than the socket's buffer).
func TestSendThenReadTwoParts(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	for _, tc := range []struct {
		name          string
		first, second []byte
	}{
		{"both", []byte("hel"), []byte("lo")},
		{"second only", nil, []byte("hello")},
		{"second larger than the buffer", []byte("head"), big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := testenv.TCPPair(t)
			pair := engine.NewPair(1, "test", b)
			r := newSendReader(t, a, pair)
			want := append(append([]byte{}, tc.first...), tc.second...)
			got := make(chan []byte, 1)
			go func() {
				buf := make([]byte, len(want))
				io.ReadFull(b, buf)
				got <- buf
				b.Write([]byte("!"))
			}()
			r.send, r.send2 = tc.first, tc.second
			buf := make([]byte, 16)
			n, err := r.Read(buf)
			if err != nil || string(buf[:n]) != "!" {
				t.Fatalf("answer %q, %v", buf[:n], err)
			}
			if g := <-got; !bytes.Equal(g, want) {
				t.Fatalf("peer got %d bytes, not the %d sent in order", len(g), len(want))
			}
			if r.send != nil || r.send2 != nil {
				t.Fatal("send left pending")
			}
			if up := pair.Bytes(engine.Up); up != int64(len(want)) {
				t.Fatalf("counted %d bytes, sent %d", up, len(want))
			}
		})
	}
}

// TestRawRead: a read with nothing to send is the raw one: it returns
// what is there, waits for what is not, and ends at EOF and deadlines as
// the runtime's read does.
func TestRawRead(t *testing.T) {
	a, b := testenv.TCPPair(t)
	r := newSendReader(t, a, nil)
	buf := make([]byte, 16)
	b.Write([]byte("there"))
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadAtLeast(r, buf, 5); err != nil || string(buf[:n]) != "there" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Write([]byte("later"))
	}()
	if n, err := io.ReadAtLeast(r, buf, 5); err != nil || string(buf[:n]) != "later" {
		t.Fatalf("got %q, %v after a wait", buf[:n], err)
	}
	if r.n != 10 {
		t.Fatalf("counted %d bytes read, want 10", r.n)
	}
	a.SetReadDeadline(time.Unix(1, 0))
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	b.Close()
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("got %d, %v from a closed peer, want EOF", n, err)
	}
}

// TestRawReadNoWait: under noWait a raw read takes what is there and
// does not wait for what is not.
func TestRawReadNoWait(t *testing.T) {
	a, b := testenv.TCPPair(t)
	r := newSendReader(t, a, nil)
	r.noWait = true
	buf := make([]byte, 16)
	start := time.Now()
	if n, err := r.Read(buf); n != 0 || err != errNothingYet {
		t.Fatalf("got %d, %v from an empty connection, want errNothingYet", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %v", d)
	}
	b.Write([]byte("there"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := r.Read(buf)
		if err == nil {
			if string(buf[:n]) != "there" {
				t.Fatalf("got %q", buf[:n])
			}
			return
		}
		if err != errNothingYet || time.Now().After(deadline) {
			t.Fatalf("got %v", err)
		}
		time.Sleep(time.Millisecond) // until loopback delivers
	}
}

// TestRawWriter: a write larger than the socket takes at once waits in
// the poller and goes whole and in order; a deadline in the past fails it.
func TestRawWriter(t *testing.T) {
	a, b := testenv.TCPPair(t)
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var w rawWriter
	w.use(a, rc)
	head := []byte("head")
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(head)+len(body))
		io.ReadFull(b, buf)
		got <- buf
	}()
	a.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if n, err := w.writev(head, body); err != nil || n != len(head)+len(body) {
		t.Fatalf("wrote %d, %v", n, err)
	}
	if g := <-got; !bytes.Equal(g, append(head, body...)) {
		t.Fatal("the peer got other bytes")
	}
	a.SetWriteDeadline(time.Unix(1, 0))
	if _, err := w.writev([]byte("late"), nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

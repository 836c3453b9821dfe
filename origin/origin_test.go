// Tests of the raw TCP protocols and of the Server's lifecycle.

package origin

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n)})
	r.Read(b)
	return b
}

// TestEchoHalfClose sends a payload and half-closes before reading: the echo
// must return every byte and then a FIN of its own.
func TestEchoHalfClose(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	c := dial(t, serve(t, s, Echo))
	want := randomBytes(3<<20 + 17)

	writeErr := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = c.CloseWrite()
		}
		writeErr <- err
	}()
	got, err := io.ReadAll(c) // ends only on the echo's FIN
	if err != nil {
		t.Fatalf("reading echo: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo returned %d bytes, differing from the %d sent", len(got), len(want))
	}
	st := s.Stats()[Echo]
	if st.BytesIn != int64(len(want)) || st.BytesOut != int64(len(want)) || st.Accepted != 1 {
		t.Errorf("stats = %+v, want 1 conn and %d bytes each way", st, len(want))
	}
}

func TestSinkReadsAllThenCloses(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	c := dial(t, serve(t, s, Sink))
	payload := randomBytes(2 << 20)
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || len(got) != 0 {
		t.Fatalf("after half-close, sink sent %d bytes, err %v; want a clean FIN", len(got), err)
	}
	if in := s.Stats()[Sink].BytesIn; in != int64(len(payload)) {
		t.Errorf("sink read %d bytes, want %d", in, len(payload))
	}
}

func TestSourceStreamsUntilPeerCloses(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	c := dial(t, serve(t, s, Source))
	got := make([]byte, 3*sourceBufSize)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, sourceBufSize)
	pattern{seed: sourceSeed}.fill(want, 0)
	for i := range 3 {
		if !bytes.Equal(got[i*sourceBufSize:(i+1)*sourceBufSize], want) {
			t.Fatalf("block %d of the source stream is not the pattern", i)
		}
	}
	c.Close()
	// The source notices only when a write fails on the reset.
	testenv.Eventually(t, "source to drop the closed connection", func() bool { return s.Stats()[Source].Active == 0 })
}

func TestRRAnswersWholeRequests(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	const size = 1460
	c := dial(t, serve(t, s, RR, WithRRSize(size)))
	for i := range 20 {
		req := randomBytes(size)
		req[0] = byte(i)
		// Two writes: the server must wait for the whole request.
		if _, err := c.Write(req[:size/3]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(req[size/3:]); err != nil {
			t.Fatal(err)
		}
		resp := make([]byte, size)
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatalf("txn %d: %v", i, err)
		}
		if !bytes.Equal(resp, req) {
			t.Fatalf("txn %d: response differs from request", i)
		}
	}
	c.CloseWrite()
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the last txn: %d extra bytes, err %v; want a clean FIN", len(rest), err)
	}
}

func TestServeRejectsBadConfig(t *testing.T) {
	s := newServer(t)
	if err := s.Serve("gopher", listen(t)); err == nil {
		t.Error("Serve accepted an unknown protocol")
	}
	if err := s.Serve(RR, listen(t), WithRRSize(0)); err == nil {
		t.Error("Serve accepted rr size 0")
	}
}

// TestCloseStopsEverything opens busy and idle connections on every protocol
// and checks Close cuts them, stops the listeners and returns promptly.
func TestCloseStopsEverything(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := New(nil)
	addrs := map[Proto]string{}
	conns := map[Proto]*net.TCPConn{}
	for _, p := range Protos() {
		addrs[p] = serve(t, s, p)
		conns[p] = dial(t, addrs[p])
	}
	// A busy source and a half-done stream, besides the idle ones.
	if _, err := io.ReadFull(conns[Source], make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	conns[Stream].Write([]byte{0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 10})

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}

	for p, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); isTimeout(err) {
			t.Errorf("%s connection still open after Close: %v", p, err)
		}
	}
	for p, addr := range addrs {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("%s listener still accepts after Close", p)
		}
	}
	if err := s.Serve(Echo, listen(t)); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close = %v, want ErrServerClosed", err)
	}
	for p, st := range s.Stats() {
		if st.Active != 0 {
			t.Errorf("%s: %d connections active after Close", p, st.Active)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

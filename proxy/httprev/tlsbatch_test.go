// Tests of batched TLS writes: a long write's records in one socket write, whole and in order.

package httprev

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// writeCounter is a socket that counts its writes.
type writeCounter struct {
	net.Conn
	writes atomic.Int64
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(b)
}

// TestBatchedTLSOneWrite: a 64 KiB write through the terminator's TLS
// connection, four records, reaches the socket in one write, and the
// client reads it whole; a write of a record or less is one write too.
func TestBatchedTLSOneWrite(t *testing.T) {
	tt, err := newTerminator(&config.TLS{Certificates: []config.Certificate{certFor(t, t.TempDir(), "shop.test")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	body := make([]byte, 64<<10)
	for i := range body {
		body[i] = byte(i / 251)
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, len(body)+1024)
		n, _ := io.ReadFull(c, b)
		got <- b[:n]
	}()
	sock, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	wc := &writeCounter{Conn: sock}
	tc := newBatchedTLS(wc, tt.cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	for _, part := range [][]byte{body, body[:1024]} {
		before := wc.writes.Load()
		if n, err := tc.Write(part); err != nil || n != len(part) {
			t.Fatalf("wrote %d of %d: %v", n, len(part), err)
		}
		if w := wc.writes.Load() - before; w != 1 {
			t.Errorf("a %d-byte write went to the socket in %d writes, want 1", len(part), w)
		}
	}
	if b := <-got; !bytes.Equal(b, append(body[:len(body):len(body)], body[:1024]...)) {
		t.Errorf("the client read %d bytes, not the %d written", len(b), len(body)+1024)
	}
}

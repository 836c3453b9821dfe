// Reading a connection in tests: to EOF or for n bytes, failing the test if that takes longer than Wait.

package testenv

import (
	"io"
	"net"
	"testing"
	"time"
)

// Wait is how long ReadAll and ReadFull wait before they fail the test:
// generous, since lab tests share a few cores.
const Wait = 10 * time.Second

// ReadAll reads c to EOF within Wait, failing the test otherwise.
func ReadAll(tb testing.TB, c net.Conn) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(Wait))
	b, err := io.ReadAll(c)
	if err != nil {
		tb.Fatalf("read to EOF: %d bytes, then %v", len(b), err)
	}
	return b
}

// ReadFull reads exactly n bytes from c within Wait, failing the test
// otherwise.
func ReadFull(tb testing.TB, c net.Conn, n int) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(Wait))
	b := make([]byte, n)
	if got, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("read %d bytes: got %d, then %v", n, got, err)
	}
	return b
}

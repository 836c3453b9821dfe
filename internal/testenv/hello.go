// The ClientHello Go's TLS client sends, captured for tests of what reads it.

package testenv

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// GoHello is the first flight Go's TLS client sends with cfg: the record
// carrying its ClientHello, as a server reads it.
func GoHello(tb testing.TB, cfg *tls.Config) []byte {
	tb.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		defer client.Close()
		tls.Client(client, cfg).Handshake() // fails when the pipe closes
	}()
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := server.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			tb.Fatalf("reading Go's hello: %v", err)
		}
		if len(out) >= 5 && len(out) >= 5+int(out[3])<<8|int(out[4]) {
			return out // Go sends its hello as one record
		}
	}
}

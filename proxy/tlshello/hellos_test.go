// Test hellos: real ones from Go's TLS client, and hand-built ones for what Go's client never sends (GREASE, ECH, malformed extensions).

package tlshello_test

import (
	"golang.org/x/crypto/cryptobyte"
)

// ext is one extension of a built hello.
type ext struct {
	typ  uint16
	data []byte
}

// buildHello is a ClientHello handshake message (header included) with
// GREASE and real cipher suites and the given extensions in order.
func buildHello(exts ...ext) []byte {
	var b cryptobyte.Builder
	b.AddUint8(1) // client_hello
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32)) // random
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 32)) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, s := range []uint16{0x8a8a, 0x1301, 0x1302, 0xc02f} {
				b.AddUint16(s)
			}
		})
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range exts {
				b.AddUint16(e.typ)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
			}
		})
	})
	return b.BytesOrPanic()
}

// sniExt is a server_name extension with a host_name entry for each name.
func sniExt(names ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddUint8(0)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
		}
	})
	return ext{0, b.BytesOrPanic()}
}

// alpnExt is an ALPN extension offering protos.
func alpnExt(protos ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, p := range protos {
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(p)) })
		}
	})
	return ext{16, b.BytesOrPanic()}
}

// echExt is an outer encrypted_client_hello extension (type outer, a
// cipher suite, config id, an encapsulated key and a payload), as a
// client that uses ECH sends beside the public name.
func echExt() ext {
	data := []byte{0, 0x00, 0x01, 0x00, 0x01, 7, 0, 2, 0xaa, 0xbb, 0, 3, 1, 2, 3}
	return ext{0xfe0d, data}
}

// records wraps a handshake message in TLS handshake records of at most
// size bytes of it each.
func records(msg []byte, size int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

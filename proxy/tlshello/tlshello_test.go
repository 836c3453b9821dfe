// Tests of reading hellos: split every way, with GREASE and ECH, refused when malformed or too large.

package tlshello_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/tlshello"
)

// readAll reads stream with tlshello.Read, whole and one byte per read,
// and checks both give the same answer and keep every byte they read.
func readAll(t *testing.T, stream []byte) (*tlshello.Hello, []byte, error) {
	t.Helper()
	h, got, err := tlshello.Read(bytes.NewReader(stream))
	h1, got1, err1 := tlshello.Read(iotest.OneByteReader(bytes.NewReader(stream)))
	if (err == nil) != (err1 == nil) || (h == nil) != (h1 == nil) || (h != nil && !sameHello(h, h1)) {
		t.Fatalf("one byte per read: %+v, %v; whole: %+v, %v", h1, err1, h, err)
	}
	if !bytes.HasPrefix(stream, got) || !bytes.HasPrefix(stream, got1) {
		t.Fatalf("the bytes read are not what came: %x", got)
	}
	return h, got, err
}

func sameHello(a, b *tlshello.Hello) bool {
	return a.ServerName == b.ServerName && a.ECH == b.ECH && slices.Equal(a.ALPN, b.ALPN)
}

// TestGoClientHellos: what Go's TLS client sends, as it sends it, in
// 1-byte segments, and cut into several records.
func TestGoClientHellos(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want tlshello.Hello
	}{
		{"sni-alpn", &tls.Config{ServerName: "A.Test", NextProtos: []string{"h2", "http/1.1"}}, tlshello.Hello{ServerName: "a.test", ALPN: []string{"h2", "http/1.1"}}},
		{"sni", &tls.Config{ServerName: "b.test"}, tlshello.Hello{ServerName: "b.test"}},
		{"no-sni", &tls.Config{InsecureSkipVerify: true}, tlshello.Hello{}},
		{"tls12", &tls.Config{ServerName: "old.test", MaxVersion: tls.VersionTLS12}, tlshello.Hello{ServerName: "old.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := testenv.GoHello(t, tc.cfg)
			msg := first[5:]
			for _, stream := range [][]byte{first, records(msg, 1), records(msg, 100), records(msg, len(msg)/2+1)} {
				h, got, err := readAll(t, stream)
				if err != nil || !sameHello(h, &tc.want) {
					t.Fatalf("got %+v, %v; want %+v", h, err, tc.want)
				}
				if !bytes.Equal(got, stream) {
					t.Errorf("kept %d bytes of the %d of the hello", len(got), len(stream))
				}
			}
		})
	}
}

// TestBytesAfterHello: what the client sent after its hello in the same
// read (0-RTT data) is kept, for the server to get too.
func TestBytesAfterHello(t *testing.T) {
	stream := append(records(buildHello(sniExt("a.test")), 1<<14), 23, 3, 3, 0, 3, 'x', 'y', 'z')
	h, got, err := tlshello.Read(bytes.NewReader(stream))
	if err != nil || h.ServerName != "a.test" || !bytes.Equal(got, stream) {
		t.Fatalf("got %+v, %d of %d bytes, %v", h, len(got), len(stream), err)
	}
}

// TestBuiltHellos: extensions Go's client does not send.
func TestBuiltHellos(t *testing.T) {
	for _, tc := range []struct {
		name string
		exts []ext
		want tlshello.Hello
	}{
		{"grease", []ext{{0x0a0a, nil}, sniExt("a.test"), alpnExt("\x3a\x3a", "h2"), {0xfafa, []byte{0}}},
			tlshello.Hello{ServerName: "a.test", ALPN: []string{"h2"}}},
		{"ech-outer-name", []ext{sniExt("public.test"), echExt(), alpnExt("h2")},
			tlshello.Hello{ServerName: "public.test", ALPN: []string{"h2"}, ECH: true}},
		{"other-name-type", []ext{{0, []byte{0, 6, 9, 0, 3, 'x', 'y', 'z'}}}, tlshello.Hello{}},
		{"alpn-only", []ext{alpnExt("h2")}, tlshello.Hello{ALPN: []string{"h2"}}},
		{"no-extensions", nil, tlshello.Hello{}},
		{"many-extensions", append(manyExts(40), sniExt("a.test")), tlshello.Hello{ServerName: "a.test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := buildHello(tc.exts...)
			if tc.exts == nil {
				msg = withoutExtensions(msg)
			}
			h, _, err := readAll(t, records(msg, 1<<14))
			if err != nil || !sameHello(h, &tc.want) {
				t.Fatalf("got %+v, %v; want %+v", h, err, tc.want)
			}
		})
	}
}

// withoutExtensions drops the empty extension list of a built hello, as
// a TLS 1.0 client without extensions sends it.
func withoutExtensions(msg []byte) []byte {
	out := slices.Clone(msg[:len(msg)-2])
	n := len(out) - 4
	out[1], out[2], out[3] = byte(n>>16), byte(n>>8), byte(n)
	return out
}

// TestRefused: what is not a hello a TLS server would parse is refused,
// malformed, as soon as the bytes say so.
func TestRefused(t *testing.T) {
	good := buildHello(sniExt("a.test"))
	trailing := slices.Clone(good)
	trailing = append(trailing, 0)
	trailing[3]++ // the handshake length covers the stray byte
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")},
		{"sslv2", []byte{0x80, 0x2e, 0x01, 0x00, 0x02}},
		{"alert-record", []byte{21, 3, 1, 0, 2, 2, 40}},
		{"record-version", []byte{22, 4, 1, 0, 4}},
		{"empty-record", append([]byte{22, 3, 1, 0, 0}, records(good, 1<<14)...)},
		{"record-too-long", []byte{22, 3, 1, 0x40, 0x01}},
		{"server-hello", records(append([]byte{2}, good[1:]...), 1<<14)},
		{"two-sni-extensions", records(buildHello(sniExt("a.test"), alpnExt("h2"), sniExt("b.test")), 1<<14)},
		{"two-host-names", records(buildHello(sniExt("a.test", "b.test")), 1<<14)},
		{"empty-sni", records(buildHello(ext{0, nil}), 1<<14)},
		{"trailing-dot", records(buildHello(sniExt("a.test.")), 1<<14)},
		{"empty-label", records(buildHello(sniExt("a..test")), 1<<14)},
		{"space", records(buildHello(sniExt("a test")), 1<<14)},
		{"nul", records(buildHello(sniExt("a.test\x00.evil")), 1<<14)},
		{"empty-alpn", records(buildHello(alpnExt("")), 1<<14)},
		{"trailing-byte", records(trailing, 1<<14)},
		{"extension-overruns", records(buildHello(ext{16, []byte{0, 9, 2, 'h', '2'}}), 1<<14)},
		{"extension-twice-of-many", records(buildHello(append(manyExts(40), sniExt("a.test"), ext{0x1005, nil})...), 1<<14)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(t, tc.stream)
			var he *tlshello.Error
			if !errors.As(err, &he) || he.Reason != tlshello.ReasonMalformed {
				t.Fatalf("got %v, want a malformed hello", err)
			}
		})
	}
}

// TestTooLarge: a hello announced larger than MaxBytes is refused from
// its header, before the rest is read; one cut into records so small
// that their headers take it past MaxBytes is refused there.
func TestTooLarge(t *testing.T) {
	header := []byte{22, 3, 1, 0, 4, 1, 0, 0x50, 0x00} // a 20 KiB hello
	_, got, err := tlshello.Read(bytes.NewReader(header))
	var he *tlshello.Error
	if !errors.As(err, &he) || he.Reason != tlshello.ReasonTooLarge || len(got) != len(header) {
		t.Fatalf("20 KiB hello: %v after %d bytes, want too large after %d", err, len(got), len(header))
	}
	big := buildHello(sniExt("a.test"), ext{0xffce, make([]byte, 3000)})
	_, got, err = tlshello.Read(bytes.NewReader(records(big, 1)))
	if !errors.As(err, &he) || he.Reason != tlshello.ReasonTooLarge || len(got) != tlshello.MaxBytes {
		t.Fatalf("3 KiB hello in 1-byte records: %v after %d bytes, want too large after %d", err, len(got), tlshello.MaxBytes)
	}
	if _, _, err := tlshello.Read(bytes.NewReader(records(big, 1<<14))); err != nil {
		t.Fatalf("the same hello in one record: %v", err)
	}
}

// TestCutShort: a client that closes before its hello is whole gives
// io.ErrUnexpectedEOF, with what it sent.
func TestCutShort(t *testing.T) {
	stream := records(buildHello(sniExt("a.test")), 1<<14)
	_, got, err := tlshello.Read(bytes.NewReader(stream[:20]))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 20 {
		t.Fatalf("got %v after %d bytes, want unexpected EOF after 20", err, len(got))
	}
}

// manyExts are n empty extensions of distinct unknown types, 0x1000 on.
func manyExts(n int) []ext {
	out := make([]ext, n)
	for i := range out {
		out[i] = ext{uint16(0x1000 + i), nil}
	}
	return out
}

// TestTrickledHelloCost: a hello trickled a byte per read in 1-byte
// records, which a client can send to make the proxy work, is read with
// a handful of allocations, not some for each read: what came before is
// not scanned again.
func TestTrickledHelloCost(t *testing.T) {
	stream := records(buildHello(sniExt("a.test"), ext{0xffce, make([]byte, 2000)}), 1)
	allocs := testing.AllocsPerRun(3, func() {
		if h, _, err := tlshello.Read(iotest.OneByteReader(bytes.NewReader(stream))); err != nil || h.ServerName != "a.test" {
			t.Fatalf("got %+v, %v", h, err)
		}
	})
	if allocs > 64 {
		t.Fatalf("%v allocations to read a %d-byte hello a byte per read, want at most 64", allocs, len(stream))
	}
}

// Fuzzing the ClientHello reader: no input panics, every read answers the same however the bytes arrive, and the bytes kept are what came.

package tlshello_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"testing"
	"testing/iotest"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/tlshello"
)

func FuzzRead(f *testing.F) {
	for _, cfg := range []*tls.Config{
		{ServerName: "a.test", NextProtos: []string{"h2", "http/1.1"}},
		{InsecureSkipVerify: true},
	} {
		f.Add(testenv.GoHello(f, cfg))
	}
	f.Add(records(buildHello(sniExt("a.test"), echExt(), alpnExt("\x0a\x0a", "h2"), ext{0x1a1a, nil}), 7))
	f.Add(records(buildHello(sniExt("a.test", "b.test")), 1<<14))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0x50, 0x00})
	f.Add(records(buildHello(append(manyExts(40), sniExt("a.test"))...), 5))
	f.Fuzz(func(t *testing.T, stream []byte) {
		h, got, err := tlshello.Read(bytes.NewReader(stream))
		h1, got1, err1 := tlshello.Read(iotest.OneByteReader(bytes.NewReader(stream)))
		if !bytes.HasPrefix(stream, got) || !bytes.HasPrefix(stream, got1) || len(got) > tlshello.MaxBytes {
			t.Fatalf("kept bytes that are not what came, or more than MaxBytes: %d, %d", len(got), len(got1))
		}
		var he, he1 *tlshello.Error
		if errors.As(err, &he) != errors.As(err1, &he1) || (he != nil && he.Reason != he1.Reason) {
			t.Fatalf("whole: %v; one byte per read: %v", err, err1)
		}
		if err != nil {
			return
		}
		if err1 != nil || !sameHello(h, h1) {
			t.Fatalf("whole: %+v; one byte per read: %+v, %v", h, h1, err1)
		}
		msg, err := tlshello.Scan(got1)
		if err != nil || msg == nil {
			t.Fatalf("the bytes kept one byte at a time do not hold the hello: %v", err)
		}
	})
}

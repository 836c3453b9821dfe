// Benchmarks of reading a hello: a browser-sized one in one read, and one trickled a byte per read in 1-byte records.

package tlshello_test

import (
	"bytes"
	"crypto/tls"
	"testing"
	"testing/iotest"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/tlshello"
)

// BenchmarkRead reads Go's client hello as a server gets it: one record
// in one read.
func BenchmarkRead(b *testing.B) {
	stream := testenv.GoHello(b, &tls.Config{ServerName: "a.test", NextProtos: []string{"h2", "http/1.1"}})
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		if _, _, err := tlshello.Read(bytes.NewReader(stream)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadTrickled reads a 3 KiB hello cut into 1-byte records and
// sent a byte per read: the most reads and records a client can make
// the reader go through within MaxBytes.
func BenchmarkReadTrickled(b *testing.B) {
	stream := records(buildHello(sniExt("a.test"), ext{0xffce, make([]byte, 2000)}), 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tlshello.Read(iotest.OneByteReader(bytes.NewReader(stream))); err != nil {
			b.Fatal(err)
		}
	}
}

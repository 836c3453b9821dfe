// Tests that the payload pattern is seekable, deterministic and random-looking.

package origin

import (
	"bytes"
	"compress/flate"
	"testing"
)

func TestPatternFillIsSeekable(t *testing.T) {
	p := patternFor(seedObject, 12345)
	whole := make([]byte, 4096)
	p.fill(whole, 0)
	for _, r := range [][2]int{{0, 1}, {1, 8}, {3, 5}, {7, 9}, {8, 16}, {13, 4000}, {4095, 4096}, {100, 100}} {
		part := make([]byte, r[1]-r[0])
		p.fill(part, int64(r[0]))
		if !bytes.Equal(part, whole[r[0]:r[1]]) {
			t.Errorf("fill at [%d,%d) differs from the same range of a whole fill", r[0], r[1])
		}
	}
}

func TestPatternLooksRandom(t *testing.T) {
	const n = 4 << 20
	a := make([]byte, n)
	patternFor(seedStreamDown, n).fill(a, 0)

	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(a)
	w.Close()
	if buf.Len() < n {
		t.Errorf("%d pattern bytes compress to %d", n, buf.Len())
	}

	b := make([]byte, n)
	patternFor(seedStreamDown, n+1).fill(b, 0)
	if bytes.Equal(a[:64], b[:64]) {
		t.Error("streams of different lengths start alike")
	}
	patternFor(seedStreamUp, n).fill(b, 0)
	if bytes.Equal(a[:64], b[:64]) {
		t.Error("upload and download streams start alike")
	}
}

func BenchmarkPatternFill(b *testing.B) {
	buf := make([]byte, 64<<10)
	p := patternFor(seedObject, 1)
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		p.fill(buf, int64(i*len(buf)))
	}
}

// A seekable pseudo-random byte stream, cheap enough to generate at line rate, for payloads that can be verified.

package origin

import "encoding/binary"

// pattern is a pseudo-random byte stream where the 8 bytes at offset 8i are
// splitmix64 of (seed, i), little-endian. Being counter-based, any range can
// be produced without the bytes before it, so a verifier can regenerate
// exactly the slice it just read. splitmix64 passes BigCrush: the stream does
// not compress and does not repeat within 2^64 words.
type pattern struct{ seed uint64 }

// Seed domains keep the streams of different uses and lengths apart.
const (
	seedObject     = 0x6f626a6563740000 // "object"
	seedStreamUp   = 0x75706c6f61640000 // "upload"
	seedStreamDown = 0x646f776e6c6f6164 // "download"
)

// patternFor returns the stream for one use (a seed domain) and length, so
// that, say, a 1 MB object is not a prefix of a 2 MB one.
func patternFor(domain uint64, length int64) pattern {
	return pattern{seed: mix64(domain ^ uint64(length))}
}

// mix64 is the splitmix64 finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (p pattern) word(i uint64) uint64 {
	return mix64(p.seed + (i+1)*0x9e3779b97f4a7c15)
}

// fill writes the stream's bytes [off, off+len(b)) into b.
func (p pattern) fill(b []byte, off int64) {
	i := uint64(off) / 8
	if r := off % 8; r != 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], p.word(i))
		b = b[copy(b, w[r:]):]
		i++
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, p.word(i))
		b = b[8:]
		i++
	}
	if len(b) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], p.word(i))
		copy(b, w[:])
	}
}

// Reused memory for the drains: each splice of a busy pair reads up to a window of owed bytes per direction and needs a packet's scratch space, which fresh allocations turned into garbage-collector work per splice.

package ip

import "sync"

// maxPooledOwed is the largest owed-bytes buffer kept for reuse; a larger
// one (a pair spliced with megabytes queued) is left to the collector.
const maxPooledOwed = 4 << 20

var (
	owedPool    sync.Pool // *[]byte, length 0
	scratchPool sync.Pool // *[]byte, drainScratch bytes
)

// owedBuf returns an empty buffer with room for at least n bytes.
func owedBuf(n int) []byte {
	if p, ok := owedPool.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, max(n, 64<<10))
}

// freeOwed gives b back for reuse; b must not be used after.
func freeOwed(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledOwed {
		return
	}
	b = b[:0]
	owedPool.Put(&b)
}

// drainScratch is the size of a drain's packet buffer: a GSO packet's
// headers and up to 64 KiB of payload.
const drainScratch = vnetHdrLen + ethHdrLen + 60 + tsOptLen + 65536

func scratchBuf() []byte {
	if p, ok := scratchPool.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, drainScratch)
}

func freeScratch(b []byte) {
	if cap(b) != drainScratch {
		return
	}
	b = b[:drainScratch]
	scratchPool.Put(&b)
}

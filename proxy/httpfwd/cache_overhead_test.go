// The cache bound counts what entries cost the heap, not only their bodies: many tiny responses stay within the configured bytes of memory.

package httpfwd

import (
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestTinyEntriesStayWithinTheBound(t *testing.T) {
	const bound = 4 << 20
	c := NewCache(bound)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		c.put(&entry{key: "http://h/obj/" + strconv.Itoa(i), header: http.Header{"Content-Type": {"text/plain"}},
			body: []byte("x"), stored: time.Now(), expires: time.Now().Add(time.Hour)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if c.Bytes() > bound {
		t.Errorf("cache counts %d bytes, bound %d", c.Bytes(), bound)
	}
	// Within the bound give or take the accounting's approximation.
	if heap > 2*bound {
		t.Errorf("100,000 one-byte entries took %d bytes of heap with a %d-byte bound (%d entries kept)", heap, bound, c.Entries())
	}
	if c.Entries() >= 100_000 || c.Entries() == 0 {
		t.Errorf("%d entries kept: the bound should have evicted most", c.Entries())
	}
}

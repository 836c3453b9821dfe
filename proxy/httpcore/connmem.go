// Memory a client connection takes from a pool for its life: its head readers' buffers, its heads' text and its requests' and responses' memory.

package httpcore

import (
	"bufio"
	"sync"
)

// connMem is what a Conn takes from connMems when it starts and gives
// back when Serve returns: the two head readers (16 KiB each), the
// buffer its heads are written in, and the memory its requests and
// responses are built in (Reuse). A client that opens a connection per
// request (Connection: close) would otherwise have each allocated anew
// per request: ~40 KiB and a dozen allocations, and with them garbage
// collections, whose stops of the world show in the proxy's p99.
type connMem struct {
	client, up *bufio.Reader
	head       []byte
	ex         exchangeMem
}

// keptHead bounds the head buffer a connMem keeps: one grown by an
// unusual head goes with its connection.
const keptHead = 16 << 10

var connMems = sync.Pool{New: func() any {
	return &connMem{client: bufio.NewReaderSize(nil, readerSize), up: bufio.NewReaderSize(nil, readerSize)}
}}

// takeMem gives c its memory from connMems.
func (c *Conn) takeMem() {
	m := connMems.Get().(*connMem)
	c.pooled = m
	m.client.Reset(&c.clientIn)
	c.client, c.upR, c.head = m.client, m.up, m.head[:0]
}

// release gives c's memory back to connMems, once nothing can use it:
// Serve returned, the deferred response was written (finish) and the
// upstream given up (Close), and no request, response or string of
// theirs is held (Reuse's contract). c must not be used afterwards.
func (c *Conn) release() {
	m := c.pooled
	if m == nil {
		return
	}
	c.pooled, c.client, c.upR, c.mem = nil, nil, nil, nil
	c.clientIn.send, c.clientIn.send2 = nil, nil
	if cap(c.head) <= keptHead {
		m.head = c.head[:0]
	}
	c.head = nil
	m.client.Reset(nil)
	m.up.Reset(nil)
	connMems.Put(m)
}

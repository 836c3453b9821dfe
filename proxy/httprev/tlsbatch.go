// Sending what one write seals through TLS in one system call: a body's records gathered under the TLS connection and written together.

package httprev

import (
	"crypto/tls"
	"net"
	"sync"
)

// batchedTLS is a client's TLS connection whose writes of more than one
// record go to the socket in one write. crypto/tls sends each record it
// seals in a write of its own: a 64 KiB body took four, each pushing its
// 16 KiB through TCP on its own. The records of one Write now gather
// under it (recordBatch) and go in one, as TCP then sends them in as few
// segments as it can.
type batchedTLS struct {
	*tls.Conn
	batch *recordBatch
}

// newBatchedTLS is the server side of a TLS connection over sock.
func newBatchedTLS(sock net.Conn, cfg *tls.Config) *batchedTLS {
	rb := &recordBatch{Conn: sock}
	return &batchedTLS{Conn: tls.Server(rb, cfg), batch: rb}
}

// batchAbove is the shortest Write batchedTLS gathers: one that fills
// more than a record (crypto/tls's 16 KiB of plaintext). A shorter one is
// one record and one write already.
const batchAbove = 16 << 10

// Write seals b and sends its records; those of a b longer than
// batchAbove go in one write.
func (c *batchedTLS) Write(b []byte) (int, error) {
	if len(b) <= batchAbove {
		return c.Conn.Write(b)
	}
	c.batch.start()
	n, err := c.Conn.Write(b)
	if ferr := c.batch.flush(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}

// recordBatch is the socket under a TLS connection: between start and
// flush, what crypto/tls writes is kept, in order, and flush writes it
// all. crypto/tls writes to it only under its own lock, from any
// goroutine (a record the reader answers, such as a key update, included):
// mu orders those writes with start and flush, so that a write that
// comes while a batch is open joins it, behind its records.
type recordBatch struct {
	net.Conn
	mu  sync.Mutex
	buf *[]byte // the open batch; nil when none is
}

// batchBufs are the batches' buffers, held for one Write only, so that an
// idle connection holds none: a 64 KiB body's records with their headers
// and tags.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 66<<10); return &b }}

func (rb *recordBatch) start() {
	rb.mu.Lock()
	rb.buf = batchBufs.Get().(*[]byte)
	rb.mu.Unlock()
}

func (rb *recordBatch) Write(b []byte) (int, error) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.buf != nil {
		*rb.buf = append(*rb.buf, b...)
		return len(b), nil
	}
	return rb.Conn.Write(b)
}

// flush writes the open batch and closes it.
func (rb *recordBatch) flush() error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	_, err := rb.Conn.Write(*rb.buf)
	*rb.buf = (*rb.buf)[:0]
	batchBufs.Put(rb.buf)
	rb.buf = nil
	return err
}

// Writes through TLS: a head and the start of its body sealed in one record and sent in one write.

package httpcore

import (
	"net"
	"sync"
)

// maxJoined is the most writeJoined copies into one write: a TLS record's
// largest plaintext (2^14 bytes), so that the join seals one record.
const maxJoined = 16 << 10

// joinBufs are writeJoined's buffers, taken for one write only.
var joinBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxJoined); return &b }}

// writeJoined writes b1, then b2, to conn, a connection without a raw
// socket under it (a *tls.Conn): b1 and as much of b2 as fits in
// maxJoined go in one Write, the rest in another. Through TLS each Write
// seals its own records and sends each record in its own system call,
// so a head written apart from its body costs a record and a send more:
// a 1 KiB response took two of each, as HAProxy and nginx send one. A
// *net.TCPConn takes both in one writev.
func writeJoined(conn net.Conn, b1, b2 []byte) (int, error) {
	if _, plain := conn.(*net.TCPConn); plain || len(b1) == 0 || len(b2) == 0 || len(b1) >= maxJoined {
		bufs := net.Buffers{b1, b2}
		n, err := bufs.WriteTo(conn)
		return int(n), err
	}
	k := min(len(b2), maxJoined-len(b1))
	bp := joinBufs.Get().(*[]byte)
	n, err := conn.Write(append(append((*bp)[:0], b1...), b2[:k]...))
	joinBufs.Put(bp)
	if err != nil || k == len(b2) {
		return n, err
	}
	m, err := conn.Write(b2[k:])
	return n + m, err
}

// The raw TCP protocols: echo, sink, source and rr.

package origin

import (
	"io"
	"net"
)

const (
	echoBufSize   = 64 << 10
	sinkBufSize   = 256 << 10
	sourceBufSize = 1 << 20
)

// sourceSeed seeds the block the source protocol repeats.
const sourceSeed = 0x5ca1ab1e0000005c

// closeWriter is the half-close a *net.TCPConn (and friends) offer.
type closeWriter interface{ CloseWrite() error }

// closeWrite sends FIN if conn can half-close; a conn that cannot is closed
// whole by the Server when the handler returns, which also ends the stream.
func closeWrite(conn net.Conn) error {
	if cw, ok := conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serveEcho writes back every byte it reads. Reads and writes alternate, so
// when EOF arrives every earlier byte has been written and the FIN it sends
// follows the last echoed byte, carrying the client's half-close through.
func serveEcho(conn net.Conn, c *counters) error {
	buf := make([]byte, echoBufSize)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			c.in.Add(int64(n))
			w, werr := conn.Write(buf[:n])
			c.out.Add(int64(w))
			if werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return closeWrite(conn)
		}
		if err != nil {
			return err
		}
	}
}

// serveSink discards everything until EOF, then half-closes so the client
// learns that every byte it sent was read.
func serveSink(conn net.Conn, c *counters) error {
	buf := make([]byte, sinkBufSize)
	for {
		n, err := conn.Read(buf)
		c.in.Add(int64(n))
		if err == io.EOF {
			return closeWrite(conn)
		}
		if err != nil {
			return err
		}
	}
}

// serveSource writes one pseudo-random block over and over until a write
// fails, which is how a peer that closed or reset shows up. The block is
// generated once: the source must outrun any forwarder it measures.
func serveSource(conn net.Conn, c *counters) error {
	buf := make([]byte, sourceBufSize)
	pattern{seed: sourceSeed}.fill(buf, 0)
	for {
		n, err := conn.Write(buf)
		c.out.Add(int64(n))
		if err != nil {
			return err
		}
	}
}

// rrHandler answers every complete size-byte request with the same bytes in
// one write. EOF on a request boundary is a clean end and is half-closed;
// EOF inside a request is an error.
func rrHandler(size int) handler {
	return func(conn net.Conn, c *counters) error {
		buf := make([]byte, size)
		for {
			n, err := io.ReadFull(conn, buf)
			c.in.Add(int64(n))
			if err == io.EOF {
				return closeWrite(conn)
			}
			if err != nil {
				return err
			}
			w, err := conn.Write(buf)
			c.out.Add(int64(w))
			if err != nil {
				return err
			}
		}
	}
}

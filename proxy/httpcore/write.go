// Writes in control mode: to the client or the upstream, counted, with the idle deadline, head and body in one writev.

package httpcore

import (
	"io"
	"net"

	"github.com/splicer/splicer/engine"
)

// write sends b in direction d in control mode and counts it; a peer that
// takes nothing for its bound (the client: clientFull; an upstream: upIdle)
// ends the pair.
func (c *Conn) write(d engine.Direction, b []byte) error {
	p := c.S.Pair()
	dst := p.Dst(d)
	w := &c.clientW
	if d == engine.Down {
		c.clientDL.refresh(c.clientIdle(), &c.stopped)
	} else {
		c.up.dl.refresh(c.upIdle(), &c.stopped)
		w = &c.upW
	}
	var n int
	var err error
	switch {
	case w.rc != nil && w.conn == net.Conn(dst):
		n, err = w.writev(b, nil)
	case c.secured(d):
		n, err = w.writev(b, nil) // through the TLS connection, never the socket
	default:
		n, err = dst.Write(b)
	}
	p.AddBytes(d, int64(n))
	return err
}

// secured reports whether d's destination is written through TLS.
func (c *Conn) secured(d engine.Direction) bool {
	if d == engine.Down {
		return c.clientTLS
	}
	return c.up != nil && c.up.tls != nil
}

func (c *Conn) writeClient(b []byte) error { return c.write(engine.Down, b) }

// writeClientv sends a head and a body to the client in one sendmsg.
func (c *Conn) writeClientv(head, body []byte) error {
	c.clientDL.refresh(c.clientIdle(), &c.stopped)
	n, err := c.clientW.writev(head, body)
	c.S.Pair().AddBytes(engine.Down, int64(n))
	return err
}

// writeUp sends b to the current upstream in control mode.
func (c *Conn) writeUp(b []byte) error { return c.write(engine.Up, b) }

// dirWriter writes in one direction of the pair, counting bytes.
type dirWriter struct {
	c *Conn
	d engine.Direction
}

func (w dirWriter) Write(b []byte) (int, error) {
	if err := w.c.write(w.d, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *Conn) clientWriter() io.Writer { return dirWriter{c, engine.Down} }
func (c *Conn) upWriter() io.Writer     { return dirWriter{c, engine.Up} }

// Protocol upgrades (RFC 9110 7.8): a WebSocket handshake is relayed, and after the 101 both directions only forward, so the pair is spliced both ways until it closes. h2c is never relayed: the proxies read HTTP/1.1 only.

package httpcore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy"
)

// upgradeRequested returns the protocol req asks to switch to, when the
// proxy relays that switch: an HTTP/1.1 request naming Upgrade in
// Connection, for any protocol but h2c (dropped with the other hop-by-hop
// fields, so the server answers in HTTP/1.1).
func upgradeRequested(req *http.Request) string {
	up := strings.TrimSpace(req.Header.Get("Upgrade"))
	if up == "" || req.ProtoMinor != 1 || !connectionHas(req.Header, "Upgrade") {
		return ""
	}
	for _, p := range strings.Split(up, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(p), "/")
		if strings.EqualFold(name, "h2c") {
			return ""
		}
	}
	return up
}

// connectionHas reports whether the Connection field lists token.
func connectionHas(h http.Header, token string) bool {
	for _, v := range h.Values("Connection") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// switchAccepted reports whether a 101 switches to the protocol the request
// asked for.
func switchAccepted(asked string, resp *http.Response) bool {
	return asked != "" && strings.EqualFold(strings.TrimSpace(resp.Header.Get("Upgrade")), asked)
}

// relaySwitch sends a 101 to the client, what either side already sent
// past the heads, and splices the pair both ways until it closes.
func (c *Conn) relaySwitch(ctx context.Context, resp *http.Response) error {
	h := resp.Header.Clone()
	StripHopByHop(h)
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", c.upgrade)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\n", statusText(resp))
	h.Write(&b)
	b.WriteString("\r\n")
	if err := c.writeClient(b.Bytes()); err != nil {
		return err
	}
	// Bytes read ahead with the heads belong to the new protocol.
	if early := c.ClientBuffered(); len(early) > 0 {
		if err := c.writeUp(early); err != nil {
			return err
		}
	}
	if n := c.up.r.Buffered(); n > 0 {
		early, _ := c.up.r.Peek(n)
		if err := c.writeClient(early); err != nil {
			return err
		}
		c.up.r.Discard(n)
	}
	if c.inUserSpace() {
		c.S.Log().Debug("protocol switched: copying both ways", "upgrade", c.upgrade)
		return c.copyBoth()
	}
	c.S.Log().Debug("protocol switched: splicing both ways", "upgrade", c.upgrade)
	r, err := c.Splice(ctx, engine.Options{IdleTimeout: c.Idle})
	if err != nil {
		return err
	}
	if r.End == engine.EndDetached && c.up.counted {
		// The engine follows the pair past Serve (ip): the connection
		// counts for its server's least_conn until the pair ends.
		c.S.AtEnd(c.up.place.Release)
		c.up.counted = false
	}
	return proxy.EndErr(r)
}

// copyBoth copies both ways until both sides have closed their sending
// side, for a pair no engine may take (inUserSpace): the client's through
// its TLS connection. As under an engine, the pair ends when nothing
// moved either way for Idle (0: no bound); each side's end is passed on
// as a half-close.
func (c *Conn) copyBoth() error {
	c.clientDL.lift()
	c.up.dl.lift()
	p := c.S.Pair()
	up := c.up.net()
	var moved atomic.Int64 // when bytes last moved either way (UnixNano)
	moved.Store(time.Now().UnixNano())
	done := make(chan error, 1)
	go func() { // the client's bytes, upstream
		done <- copyIdle(up, c.clientConn, c.Idle, &moved, func(n int) { p.AddBytes(engine.Up, int64(n)) })
		closeWrite(up, c.up.conn)
	}()
	err := copyIdle(c.clientConn, up, c.Idle, &moved, func(n int) { p.AddBytes(engine.Down, int64(n)) })
	closeWrite(c.clientConn, p.Client)
	if err != nil {
		p.Client.SetDeadline(past) // the other way ends too
		c.up.conn.SetDeadline(past)
	}
	return errors.Join(err, <-done)
}

// closeWrite ends the sending side of conn, a TLS connection over sock
// (close_notify, then FIN) or sock itself.
func closeWrite(conn net.Conn, sock *net.TCPConn) {
	if tc, ok := conn.(interface{ CloseWrite() error }); ok && conn != net.Conn(sock) {
		tc.CloseWrite() // close_notify
	}
	sock.CloseWrite()
}

// copyIdle copies src to dst until src ends (nil) or fails, or nothing
// moved either way for idle (0: no bound): moved is when bytes last moved
// in this copy or the other way's. count is told what each write moved.
func copyIdle(dst io.Writer, src net.Conn, idle time.Duration, moved *atomic.Int64, count func(int)) error {
	buf := make([]byte, 32<<10)
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Unix(0, moved.Load()).Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			moved.Store(time.Now().UnixNano())
			k, werr := dst.Write(buf[:n])
			count(k)
			if werr != nil {
				return werr
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded) && idle > 0 && time.Since(time.Unix(0, moved.Load())) < idle:
			continue // the other way moved meanwhile
		case err != nil:
			return err
		}
	}
}

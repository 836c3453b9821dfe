// Idle connections by the thousand: opened from several source addresses, held without a goroutine each, and later checked to echo one by one.

package loadgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Idle is a set of idle connections to one address. It holds them
// without a goroutine each: the process's memory is the sockets' and
// net.Conn's, whatever the count.
type Idle struct {
	addr    string
	sources []netip.Addr
	mu      sync.Mutex
	conns   []net.Conn
}

// NewIdle prepares idle connections to addr, dialled from the source
// addresses in turn (none: the route's). One address reaches one server
// port from at most ~64,000 local ports, so 100,000 connections to one
// listener need two source addresses or more.
func NewIdle(addr string, sources []netip.Addr) *Idle {
	return &Idle{addr: addr, sources: sources}
}

// Len is how many connections are open.
func (i *Idle) Len() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.conns)
}

// Open dials n more connections, conc at a time, and keeps them; on an
// error it keeps those that connected and says how many did.
func (i *Idle) Open(ctx context.Context, n, conc int) error {
	base := i.Len()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range max(conc, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				c, err := i.dialRetrying(ctx, base+k)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				i.mu.Lock()
				i.conns = append(i.conns, c)
				i.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return fmt.Errorf("idle connections to %s: %d of %d opened: %w", i.addr, i.Len()-base, n, firstErr)
	}
	return nil
}

// dialTries is how often a connection whose handshake timed out is
// tried again: a listener whose accept queue overflows under a burst
// drops SYNs, retransmitted for about 30 s before the dial gives up.
const dialTries = 3

// dialRetrying dials connection k, again after a timeout.
func (i *Idle) dialRetrying(ctx context.Context, k int) (net.Conn, error) {
	var err error
	for range dialTries {
		var c net.Conn
		if c, err = i.dial(ctx, k); err == nil || !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
			return c, err
		}
	}
	return nil, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dial opens connection k from its source address.
func (i *Idle) dial(ctx context.Context, k int) (net.Conn, error) {
	d := &net.Dialer{}
	if len(i.sources) > 0 {
		d = SourceDialer(i.sources[k%len(i.sources)])
	}
	d.Timeout = 30 * time.Second
	return d.DialContext(ctx, "tcp", i.addr)
}

// SourceDialer dials from src with the source port chosen at connect
// (IP_BIND_ADDRESS_NO_PORT), by the 4-tuple, as a plain connect does: so
// each source address gives its whole ephemeral range to each server,
// and net.ipv4.tcp_tw_reuse applies to it. A bind to port 0 without the
// option would pick the port at bind, apart from any TIME_WAIT port and
// from every port bound on src whatever its peer.
func SourceDialer(src netip.Addr) *net.Dialer {
	return &net.Dialer{
		LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
			})
			return errors.Join(err, serr)
		},
	}
}

// Echo sends each connection a message of its own and reads it back
// (the server must echo), conc connections at a time; it returns how
// many echoed, and the first failure.
func (i *Idle) Echo(ctx context.Context, conc int, timeout time.Duration) (int, error) {
	i.mu.Lock()
	conns := i.conns
	i.mu.Unlock()
	var next, ok atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range max(conc, 1) {
		wg.Go(func() {
			var msg, got [16]byte
			for ctx.Err() == nil {
				k := int(next.Add(1)) - 1
				if k >= len(conns) {
					return
				}
				binary.BigEndian.PutUint64(msg[:], uint64(k))
				binary.BigEndian.PutUint64(msg[8:], uint64(time.Now().UnixNano()))
				if err := echoOnce(conns[k], msg[:], got[:], timeout); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("connection %d (%v): %w", k, conns[k].LocalAddr(), err) })
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load()), firstErr
}

// echoOnce writes msg on c and reads the same bytes back into got.
func echoOnce(c net.Conn, msg, got []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(msg, got) {
		return fmt.Errorf("echo %x, sent %x", got, msg)
	}
	return nil
}

// Close resets every connection (linger 0), so none lingers in
// TIME_WAIT, and forgets them.
func (i *Idle) Close() {
	i.mu.Lock()
	conns := i.conns
	i.conns = nil
	i.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// EchoSmall serves ln until it closes: each connection gets back what it
// sends, through a 64-byte buffer, so that a hundred thousand idle
// connections cost a goroutine's stack and a socket each, no more.
func EchoSmall(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			var buf [64]byte
			for {
				n, err := c.Read(buf[:])
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

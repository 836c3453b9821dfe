// Package sockopt carries socket options for an outgoing TCP connection through a context to the dialer, which sets them before connect.
//
// The code that knows an option (the forwarder's session, which has the
// client connection) is not the code that creates the upstream socket (a
// dial function that tests and the lab replace to work in a network
// namespace). A context value reaches any dial function; Control applies
// it, as a net.Dialer's ControlContext, between socket and connect, so
// the SYN already carries it:
//
//	d := net.Dialer{ControlContext: sockopt.Control}
//	c, err := d.DialContext(sockopt.WithMSS(ctx, 1360), "tcp", addr)
package sockopt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The range of TCP_MAXSEG that Linux accepts (TCP_MIN_MSS, MAX_TCP_WINDOW).
const (
	MinMSS = 88
	MaxMSS = 32767
)

// tcpiOptTimestamps is TCPI_OPT_TIMESTAMPS of tcpi_options (linux/tcp.h),
// which x/sys does not name.
const tcpiOptTimestamps = 1

// tsOptionLen is what the timestamp option takes from every segment's
// payload once negotiated (TCPOLEN_TSTAMP_ALIGNED: 10 bytes and 2 NOPs).
const tsOptionLen = 12

type mssKey struct{}

// WithMSS returns a context under which Control sets TCP_MAXSEG to mss on
// the socket before it connects: its SYN then announces at most mss, so
// the peer never sends larger segments. A value the kernel would refuse
// (outside MinMSS..MaxMSS) leaves ctx unchanged, so that the dial goes on
// with the route's MSS rather than failing.
func WithMSS(ctx context.Context, mss int) context.Context {
	if mss < MinMSS || mss > MaxMSS {
		return ctx
	}
	return context.WithValue(ctx, mssKey{}, mss)
}

// MSS is the MSS ctx asks the dialer to announce, 0 for none.
func MSS(ctx context.Context) int {
	mss, _ := ctx.Value(mssKey{}).(int)
	return mss
}

type rcvBufKey struct{}

// WithRcvBuf returns a context under which Control sets the socket's
// receive buffer so that the kernel reports bytes as its SO_RCVBUF (it
// doubles what it is given, for bookkeeping): the socket's window stays
// within it, and the kernel no longer grows the buffer itself. 0 or less
// leaves ctx unchanged.
func WithRcvBuf(ctx context.Context, bytes int) context.Context {
	if bytes <= 0 {
		return ctx
	}
	return context.WithValue(ctx, rcvBufKey{}, bytes)
}

// RcvBuf is the receive buffer ctx asks the dialer to set, 0 for none.
func RcvBuf(ctx context.Context) int {
	n, _ := ctx.Value(rcvBufKey{}).(int)
	return n
}

type portKey struct{}

// Pick is a local port a PortPicker returned for a connection to Server.
type Pick struct {
	Server netip.AddrPort
	Port   uint16
}

// PortPicker returns the local port a new connection to server should
// use, or false to let the kernel pick one (engine.UpstreamPorts).
type PortPicker func(server netip.AddrPort) (uint16, bool)

// WithLocalPort returns a context under which Control binds the socket to
// a port pick returns for the address about to be connected (the
// wildcard address: routing still picks the source), with SO_REUSEADDR
// so that connections to different servers may share a port; connect
// then fails with EADDRNOTAVAIL when the 4-tuple is in use (by another
// socket, or a TIME_WAIT), and the caller dials again: IsPortInUse.
func WithLocalPort(ctx context.Context, pick PortPicker) context.Context {
	return context.WithValue(ctx, portKey{}, pick)
}

// IsPortInUse reports whether a dial under WithLocalPort failed because
// the port it was given is in use toward that server: another port may
// succeed.
func IsPortInUse(err error) bool {
	return errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EADDRINUSE)
}

// bindTries bounds the ports Control tries to bind before leaving the
// choice to the kernel: with SO_REUSEADDR a bind fails only on a port a
// listener or a socket without SO_REUSEADDR holds.
const bindTries = 8

// bindPicked binds c to the wildcard address of its family and a port
// pick gives for server. network names the family as Go does to a
// dialer's Control ("tcp4", "tcp6"), which saves asking the socket; a
// bare "tcp" has it asked.
func bindPicked(c syscall.RawConn, network string, pick PortPicker, server netip.AddrPort) error {
	v6 := strings.HasSuffix(network, "6")
	var berr error
	err := c.Control(func(fd uintptr) {
		if !strings.HasSuffix(network, "4") && !v6 {
			sa, err := syscall.Getsockname(int(fd))
			if err != nil {
				berr = err
				return
			}
			_, v6 = sa.(*syscall.SockaddrInet6)
		}
		if berr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); berr != nil {
			return
		}
		for range bindTries {
			port, ok := pick(server)
			if !ok {
				return
			}
			if v6 {
				berr = unix.Bind(int(fd), &unix.SockaddrInet6{Port: int(port)})
			} else {
				berr = unix.Bind(int(fd), &unix.SockaddrInet4{Port: int(port)})
			}
			if !errors.Is(berr, unix.EADDRINUSE) {
				return
			}
		}
		berr = nil // the kernel picks one at connect
	})
	if err != nil {
		return err
	}
	if berr != nil {
		return fmt.Errorf("bind a local port: %w", berr)
	}
	return nil
}

type checkKey struct{}

// WithCheck returns a context under which Control calls check with the
// address about to be connected (after name resolution, so a name cannot
// resolve its way past it); an error stops the connect.
func WithCheck(ctx context.Context, check func(netip.AddrPort) error) context.Context {
	return context.WithValue(ctx, checkKey{}, check)
}

// Control is a net.Dialer ControlContext that applies the options in ctx
// to a TCP socket before it connects; without options it does nothing.
func Control(ctx context.Context, network, address string, c syscall.RawConn) error {
	if check, ok := ctx.Value(checkKey{}).(func(netip.AddrPort) error); ok {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("destination %q: %w", address, err)
		}
		if err := check(ap); err != nil {
			return err
		}
	}
	if pick, ok := ctx.Value(portKey{}).(PortPicker); ok && strings.HasPrefix(network, "tcp") {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("destination %q: %w", address, err)
		}
		if err := bindPicked(c, network, pick, ap); err != nil {
			return err
		}
	}
	mss, rcvBuf := MSS(ctx), RcvBuf(ctx)
	if (mss == 0 && rcvBuf == 0) || !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		if mss != 0 {
			if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss); err != nil {
				serr = fmt.Errorf("set TCP_MAXSEG %d: %w", mss, err)
				return
			}
		}
		if rcvBuf != 0 {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf/2); err != nil {
				serr = fmt.Errorf("set SO_RCVBUF %d: %w", rcvBuf/2, err)
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// Dialer returns a net.Dialer that applies the options in its dial
// context.
func Dialer() *net.Dialer { return &net.Dialer{ControlContext: Control} }

// AnnouncedMSS is the MSS the peer of an established connection may be
// sent, as its SYN announced it: the socket's mss_cache (tcpi_snd_mss, the
// payload of a full segment with the options of every segment taken off)
// plus the 12 bytes of the timestamp option when timestamps were
// negotiated. It is the peer's announcement unless this host's route
// toward the peer carries less (a smaller MTU on the way out), or the
// peer's largest window so far is under twice the MSS (the kernel bounds
// mss_cache by half of it: only loopback-sized MSSes meet that), in which
// case it is that smaller figure: never more than the peer accepts.
//
// This assumes no IP options, IPv6 extension headers or TCP-MD5 on the
// connection (each would take bytes off mss_cache too); the forwarder's
// sockets have none.
func AnnouncedMSS(c *net.TCPConn) (int, error) {
	info, err := TCPInfo(c)
	if err != nil {
		return 0, fmt.Errorf("TCP_INFO: %w", err)
	}
	return announcedFrom(int(info.Snd_mss), info.Options&tcpiOptTimestamps != 0), nil
}

// TCPInfo returns c's TCP_INFO: its state, counters and negotiated options.
func TCPInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	var info *unix.TCPInfo
	err := WithFD(c, func(fd int) (err error) {
		info, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		return err
	})
	return info, err
}

// announcedFrom undoes what the handshake took off the peer's MSS.
func announcedFrom(sndMSS int, timestamps bool) int {
	if timestamps {
		return sndMSS + tsOptionLen
	}
	return sndMSS
}

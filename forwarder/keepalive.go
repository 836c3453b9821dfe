// keepAlive sets a listener's tcp_keepalive on the connections it accepts and dials: once on the listening socket where accepted ones inherit it.

package forwarder

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sockopt"
)

// listenQuiet is the forwarder's own ListenFunc: Go sets nothing on the
// connections it accepts (no keepalive of its own), so that they keep
// what they inherit from the listening socket (setListenerKeepAlive), and
// a new connection costs no setsockopt for it. It listens with plain
// TCP, as HAProxy and nginx do: Go would listen with MPTCP where the
// kernel has it, whose connections engine ip cannot splice and whose
// handshakes cost the kernel more.
func listenQuiet(network, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	lc.SetMultipathTCP(false)
	return lc.Listen(context.Background(), network, addr)
}

// dialQuiet is the forwarder's own DialFunc: the socket options of its
// context set before connect (sockopt.Control), and no keepalive of Go's,
// which keepAliveDialed sets as configured instead.
func dialQuiet(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{ControlContext: sockopt.Control, KeepAlive: -1}
	return d.DialContext(ctx, network, addr)
}

// setListenerKeepAlive sets the listener's tcp_keepalive on its listening
// socket, from which Linux copies it to every connection accepted there,
// and decides whether an accepted connection still needs it set of its
// own (keepAccepted). quiet: the socket accepts without Go's keepalive
// (listenQuiet); any other (inherited from an earlier process, a test's)
// accepts with Go's default, which is the configuration's unless it says
// otherwise.
func (l *listener) setListenerKeepAlive(quiet bool) {
	l.quietAccept = quiet
	l.keepAccepted = !quiet && l.cfg.TCPKeepalive != config.DefaultTCPKeepalive
	sc, ok := l.ln.(syscall.Conn)
	if !ok {
		l.keepAccepted = true
		return
	}
	if err := sockopt.WithFD(sc, func(fd int) error { return setKeepAlive(fd, l.cfg.TCPKeepalive) }); err != nil {
		l.log.Debug("tcp_keepalive not set on the listening socket: set on each connection", "err", err)
		l.keepAccepted = true
	}
}

// setKeepAlive sets k on socket fd: off, or on with its times.
func setKeepAlive(fd int, k config.TCPKeepalive) error {
	if !k.On() {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0)
	}
	return errors.Join(
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1),
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(k.Idle.Std().Seconds())),
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(k.Interval.Std().Seconds())),
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, k.Count))
}

// keepAcceptedConn applies the listener's tcp_keepalive to c, a client
// connection, where the listening socket did not pass it on
// (setListenerKeepAlive).
func (l *listener) keepAcceptedConn(c *net.TCPConn) {
	if l.keepAccepted {
		l.keepAlive(c)
	}
}

// keepAliveDialed applies the listener's tcp_keepalive to c, an upstream
// connection. The forwarder's own dialer leaves keepalive off (dialQuiet),
// as the kernel does: off is then already so. On, it is set once c has
// been open for keepAliveDelay (the timer it returns, nil if set at
// once): a connection that closes before its first probe would be due
// never sees the probes, so a churn of short connections pays none of
// the four setsockopts. Set then, the first probe is due when it would
// have been, idle past the last segment received (TCP_KEEPIDLE counts
// the idle time already elapsed).
func (l *listener) keepAliveDialed(c *net.TCPConn) *time.Timer {
	k := l.cfg.TCPKeepalive
	if l.f.quietDial && !k.On() {
		return nil
	}
	if !l.f.quietDial {
		l.keepAlive(c)
		return nil
	}
	return time.AfterFunc(keepAliveDelay(k), func() { l.keepAliveOpen(c) })
}

// keepAliveDelay is how long an upstream connection runs before its
// keepalive is set (keepAliveDialed): half the idle time before the first
// probe, at most a second, so that it is always set before that probe is
// due.
func keepAliveDelay(k config.TCPKeepalive) time.Duration {
	return min(k.Idle.Std()/2, time.Second)
}

// keepAliveOpen applies the listener's tcp_keepalive to c unless c was
// closed meanwhile (the pair ended as the timer fired).
func (l *listener) keepAliveOpen(c *net.TCPConn) {
	if err := l.setKeepAlive(c); err != nil && !errors.Is(err, net.ErrClosed) {
		l.log.Warn("tcp_keepalive not set", "peer", c.RemoteAddr().String(), "err", err)
	}
}

// keepAlive applies the listener's tcp_keepalive to c, a client or an
// upstream connection. Go's listeners and dialers turn keepalive on with
// their own times, and a test or the lab may pass its own dialer: setting
// it here makes every connection of the listener probe as configured,
// whoever created the socket. A failure is logged, not fatal: the pair
// works without probes, as it would behind a kernel that refused them.
func (l *listener) keepAlive(c *net.TCPConn) {
	if err := l.setKeepAlive(c); err != nil {
		l.log.Warn("tcp_keepalive not set", "peer", c.RemoteAddr().String(), "err", err)
	}
}

// setKeepAlive sets the listener's tcp_keepalive on c: SO_KEEPALIVE
// first, then its times, so that TCP_KEEPIDLE arms the first probe from
// the last segment received.
func (l *listener) setKeepAlive(c *net.TCPConn) error {
	k := l.cfg.TCPKeepalive
	if !k.On() {
		return c.SetKeepAlive(false)
	}
	return c.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable:   true,
		Idle:     k.Idle.Std(),
		Interval: k.Interval.Std(),
		Count:    k.Count,
	})
}

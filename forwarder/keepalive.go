// keepAlive sets a listener's tcp_keepalive on the connections it accepts and dials.

package forwarder

import (
	"net"
)

// keepAlive applies the listener's tcp_keepalive to c, a client or an
// upstream connection. Go's listeners and dialers already turn keepalive
// on with their own times, and a test or the lab may pass its own
// dialer: setting it here makes every connection of the listener probe
// as configured, whoever created the socket. A failure is logged, not
// fatal: the pair works without probes, as it would behind a kernel that
// refused them.
func (l *listener) keepAlive(c *net.TCPConn) {
	k := l.cfg.TCPKeepalive
	var err error
	if !k.On() {
		err = c.SetKeepAlive(false)
	} else {
		err = c.SetKeepAliveConfig(net.KeepAliveConfig{
			Enable:   true,
			Idle:     k.Idle.Std(),
			Interval: k.Interval.Std(),
			Count:    k.Count,
		})
	}
	if err != nil {
		l.log.Warn("tcp_keepalive not set", "peer", c.RemoteAddr().String(), "err", err)
	}
}

// The PROXY protocol on accepted connections (accept_proxy_protocol): a trusted balancer's header read off before the pair starts, and a header from anyone else refused.

package forwarder

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/splicer/splicer/internal/acl"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// proxyHeaderTimeout bounds the wait for a trusted balancer's header, and
// for another source's first bytes, which tell whether it sends one.
// Balancers send the header at once; a client of a protocol in which the
// server speaks first waits this long for its greeting.
const proxyHeaderTimeout = 5 * time.Second

// proxyAccept is a listener's accept_proxy_protocol: the balancers it
// trusts to name the client.
type proxyAccept struct {
	from    []netip.Prefix
	timeout time.Duration
}

// newProxyAccept returns lc's proxyAccept, nil when it accepts no header.
func newProxyAccept(lc config.Listener) (*proxyAccept, error) {
	if !lc.AcceptProxyProtocol {
		return nil, nil
	}
	from, err := acl.ParsePrefixes(lc.ProxyProtocolFrom)
	if err != nil {
		return nil, err
	}
	return &proxyAccept{from: from, timeout: proxyHeaderTimeout}, nil
}

// origin is the client a header named and the address it connected to;
// zero for a client that is the socket's peer.
type origin struct{ client, local net.Addr }

// trusts reports whether a is one of the balancers.
func (pa *proxyAccept) trusts(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip := ta.AddrPort().Addr().Unmap()
	for _, p := range pa.from {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// read takes the header off a connection from a trusted balancer, which
// must send one, or checks that a connection from elsewhere does not
// start with one. It returns the client the header named (zero for none,
// and for a header without addresses: a balancer's health check), or why
// the connection is refused. ctx ending (a hard shutdown) ends the wait.
func (pa *proxyAccept) read(ctx context.Context, c *net.TCPConn) (o origin, refused string, err error) {
	c.SetReadDeadline(time.Now().Add(pa.timeout))
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer func() {
		stop()
		c.SetReadDeadline(time.Time{})
	}()
	if !pa.trusts(c.RemoteAddr()) {
		// A source that sends nothing before the deadline, or closes at
		// once, is served as it is: its proxy sees the same.
		if starts, _ := proxyproto.Starts(c); starts {
			return origin{}, "proxy_protocol_untrusted", errors.New("PROXY protocol header from a source not in proxy_protocol_from")
		}
		return origin{}, "", nil
	}
	info, err := proxyproto.Consume(c)
	if err != nil {
		return origin{}, "proxy_protocol_invalid", err
	}
	if !info.Source.IsValid() || !info.Destination.IsValid() {
		return origin{}, "", nil
	}
	return origin{client: tcpAddr(info.Source), local: tcpAddr(info.Destination)}, "", nil
}

// tcpAddr is ap as a *net.TCPAddr, IPv4-mapped addresses unmapped, as a
// socket's own addresses read.
func tcpAddr(ap netip.AddrPort) *net.TCPAddr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
}

// acceptProxied admits a connection to a listener that accepts the PROXY
// protocol: in its own goroutine, since the header may be slow to come,
// and counted as a pair (enter) meanwhile, so that max_connections and a
// shutdown count it. The access rules and the per-client cap then see the
// client the header named.
func (l *listener) acceptProxied(c *net.TCPConn) {
	o, refused, err := l.proxied.read(l.life.hard, c)
	var ip netip.Addr
	if refused == "" {
		addr := o.client
		if addr == nil {
			addr = c.RemoteAddr()
		}
		ip, refused = l.access.admit(addr)
	}
	if refused != "" {
		if err != nil {
			l.log.Debug("PROXY protocol", "client", c.RemoteAddr().String(), "err", err)
		}
		l.refuse(c, refused)
		l.leave()
		return
	}
	l.handle(c, ip, o)
}

// Who may use a listener and where its clients may go: client CIDRs, a cap per client IP, and destination rules for the kinds whose clients name the destination.

package forwarder

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/splicer/splicer/internal/acl"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/proxy"
)

// access is a listener's access rules and its per-client pair counts.
type access struct {
	clients acl.Clients
	perIP   int
	// dests is nil for kinds whose upstreams the operator configures.
	dests *acl.Destinations

	mu sync.Mutex
	// counts are the open pairs per client (clientKey).
	counts map[netip.Addr]int
}

// clientNamesDestination are the kinds whose clients say where to connect.
var clientNamesDestination = map[string]bool{"http-forward": true, "socks5": true}

func newAccess(f *Forwarder, lc config.Listener) (*access, error) {
	a := &access{perIP: lc.MaxConnectionsPerClient, counts: map[netip.Addr]int{}}
	var err error
	if a.clients.Allow, err = acl.ParsePrefixes(lc.AllowClients); err != nil {
		return nil, err
	}
	if a.clients.Deny, err = acl.ParsePrefixes(lc.DenyClients); err != nil {
		return nil, err
	}
	if !clientNamesDestination[lc.Proxy] {
		return a, nil
	}
	if openProxy(lc) {
		f.log.Warn("open proxy: anyone who reaches the listener may connect wherever its destination rules allow; set allow_clients (or socks5 users)",
			"listener", lc.Name, "listen", lc.Listen, "proxy", lc.Proxy)
	}
	a.dests = &acl.Destinations{Local: (&acl.LocalAddrs{}).Contains, Self: f.isSelf}
	if d := lc.Destinations; d != nil {
		for _, list := range []struct {
			in  []string
			out *[]acl.Rule
		}{{d.Allow, &a.dests.Allow}, {d.Deny, &a.dests.Deny}} {
			for _, s := range list.in {
				r, err := acl.ParseRule(s)
				if err != nil {
					return nil, err
				}
				*list.out = append(*list.out, r)
			}
		}
	}
	return a, nil
}

// openProxy reports whether a listener whose clients name the destination
// lets anyone use it: no allow_clients, and no credentials to check.
func openProxy(lc config.Listener) bool {
	if len(lc.AllowClients) > 0 {
		return false
	}
	return lc.Proxy != "socks5" || !lc.SOCKS5.HasUsers()
}

// admit reports why a new client at addr is refused ("" to accept) and,
// when accepted, counts it until release under client, its clientKey.
func (a *access) admit(addr net.Addr) (client netip.Addr, refused string) {
	ap := addrPortOf(addr)
	if !ap.IsValid() {
		return netip.Addr{}, ""
	}
	ip := ap.Addr().Unmap()
	client = clientKey(ip)
	if !a.clients.Permits(ip) {
		return client, "client_denied"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perIP > 0 && a.counts[client] >= a.perIP {
		return client, "max_connections_per_client"
	}
	a.counts[client]++
	return client, ""
}

// addrPortOf is addr as a netip.AddrPort, invalid if it is none: a TCP
// address's without formatting and parsing it again.
func addrPortOf(addr net.Addr) netip.AddrPort {
	if t, ok := addr.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(addr.String())
	return ap
}

// clientKey is what max_connections_per_client counts a client by: an
// IPv4 address, or an IPv6 address's /64, since one host commonly holds a
// whole /64 and would otherwise get a fresh cap per address it picks.
func clientKey(ip netip.Addr) netip.Addr {
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

// release uncounts a client admitted by admit.
func (a *access) release(client netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counts[client]--; a.counts[client] <= 0 {
		delete(a.counts, client)
	}
}

// guardDial applies the destination rules to a dial of addr: the name the
// client asked for, if any, at once; then the address actually connected
// to, in the socket's control hook, which a name an allow rule admits
// must pass too (but for an address allow list). denied counts each
// refusal.
func (a *access) guardDial(ctx context.Context, addr string, denied func()) (context.Context, error) {
	if a.dests == nil {
		return ctx, nil
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return ctx, err
	}
	port, _ := strconv.ParseUint(portText, 10, 16)
	name := proxy.DestinationName(ctx)
	if _, err := netip.ParseAddr(host); err != nil {
		name = host
	}
	named := false
	if name != "" {
		if named, err = a.dests.CheckName(name, uint16(port)); err != nil {
			denied()
			return ctx, errors.Join(proxy.ErrDestinationDenied, err)
		}
	}
	return sockopt.WithCheck(ctx, func(ap netip.AddrPort) error {
		if err := a.dests.CheckAddr(ap, named); err != nil {
			denied()
			return errors.Join(proxy.ErrDestinationDenied, err)
		}
		return nil
	}), nil
}

// isSelf reports whether ap is where this forwarder listens (a listener or
// the admin endpoint): a client must not loop a connection back into it.
func (f *Forwarder) isSelf(ap netip.AddrPort) bool {
	f.mu.Lock()
	var bound []string
	for _, l := range f.listeners {
		if l.ln != nil {
			bound = append(bound, l.ln.Addr().String())
		}
	}
	admin := f.cfg.Admin
	f.mu.Unlock()
	if admin != "" {
		bound = append(bound, admin)
	}
	for _, b := range bound {
		if sameEndpoint(b, ap) {
			return true
		}
	}
	return false
}

// sameEndpoint reports whether a listener bound to b receives connections
// to ap: same port, and the same IP or, for an unspecified one, any of
// this host's addresses.
func sameEndpoint(b string, ap netip.AddrPort) bool {
	host, portText, err := net.SplitHostPort(b)
	if err != nil || portText != strconv.Itoa(int(ap.Port())) {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if host != "" && err == nil && !ip.IsUnspecified() {
		return ip.Unmap() == ap.Addr().Unmap()
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ap.Addr().Unmap() {
			return true
		}
	}
	return false
}

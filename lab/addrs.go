// More client addresses: one address reaches one listener port from at most ~64,000 source ports, so tests and benches with more connections add addresses.

package lab

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// AddClientAddrs gives the client n more IPv4 addresses after Cfg.Client
// in its subnet (10.99.1.3, 10.99.1.4, ... by default) and returns them.
// The forwarder reaches them on its client link as it reaches Client.
// Addresses already there are kept: calling it again with the same n
// returns the same addresses.
func (l *Lab) AddClientAddrs(n int) ([]netip.Addr, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	addrs, err := nextAddrs(l.Cfg.Client, n, l.Cfg.FwdClient.Addr())
	if err != nil {
		return nil, err
	}
	h, err := l.Client.Netlink()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	link, err := h.LinkByName(ClientIf)
	if err != nil {
		return nil, fmt.Errorf("%s: find %s: %w", l.Client.Name, ClientIf, err)
	}
	for _, a := range addrs {
		p := netip.PrefixFrom(a, l.Cfg.Client.Bits())
		if err := h.AddrReplace(link, &netlink.Addr{IPNet: ipNet(p)}); err != nil {
			return nil, fmt.Errorf("%s: add %v to %s: %w", l.Client.Name, p, ClientIf, err)
		}
	}
	return addrs, nil
}

// nextAddrs are the n addresses after p's in its subnet, skipping skip
// (the forwarder's).
func nextAddrs(p netip.Prefix, n int, skip netip.Addr) ([]netip.Addr, error) {
	var out []netip.Addr
	for a := p.Addr().Next(); len(out) < n; a = a.Next() {
		// The subnet's last address is its broadcast.
		if !p.Masked().Contains(a.Next()) {
			return nil, fmt.Errorf("lab: %d addresses after %v do not fit its subnet", n, p)
		}
		if a != skip {
			out = append(out, a)
		}
	}
	return out, nil
}

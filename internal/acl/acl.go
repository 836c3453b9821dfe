// Package acl decides which clients may use a listener and which destinations a client may name (http-forward, socks5), with safe defaults: no loopback, link-local, cloud metadata, unspecified, multicast or this host's own addresses unless an address rule opens them.
package acl

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Prefixes is a list of CIDRs (a bare IP is a /32 or /128).
type Prefixes []netip.Prefix

// ParsePrefixes parses CIDRs or IPs.
func ParsePrefixes(list []string) (Prefixes, error) {
	var out Prefixes
	for _, s := range list {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR: %w", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP or CIDR", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// Contains reports whether any prefix holds a.
func (ps Prefixes) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Clients is a listener's client rules: deny wins; with an allow list only
// clients on it get in.
type Clients struct{ Allow, Deny Prefixes }

// Permits reports whether a client at a may connect.
func (c Clients) Permits(a netip.Addr) bool {
	if c.Deny.Contains(a) {
		return false
	}
	return len(c.Allow) == 0 || c.Allow.Contains(a)
}

// Rule is one destination rule: a CIDR or IP, or a name ("example.com",
// "*.example.com" for its subdomains), or any host; and a port range (all
// ports when Ports is zero).
type Rule struct {
	Prefix netip.Prefix // valid for an address rule
	Name   string       // lower case; "*." prefix for subdomains
	Ports  [2]uint16    // inclusive; {0, 0} = any
}

// ParseRule parses "HOST[:PORTS]" where HOST is a CIDR, an IP, a name, a
// "*.name" or empty (any), and PORTS is a port or a range "8000-8100". An
// IPv6 address or CIDR with a port is bracketed: "[2001:db8::/32]:443".
func ParseRule(s string) (Rule, error) {
	host, ports := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return Rule{}, fmt.Errorf("%q: missing ]", s)
		}
		host, ports = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if s[end+1:] != "" && !strings.HasPrefix(s[end+1:], ":") {
			return Rule{}, fmt.Errorf("%q: expected :PORT after ]", s)
		}
	case strings.Count(s, ":") == 1:
		host, ports, _ = strings.Cut(s, ":")
	}
	var r Rule
	var err error
	if r.Ports, err = parsePorts(ports); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	switch {
	case host == "" || host == "*":
		if ports == "" {
			return Rule{}, fmt.Errorf("%q matches everything: say 0.0.0.0/0 and ::/0 if that is meant", s)
		}
	case strings.ContainsAny(host, "/:") || isIPv4(host):
		if r.Prefix, err = parsePrefix(host); err != nil {
			return Rule{}, err
		}
	default:
		if !validName(strings.TrimPrefix(host, "*.")) {
			return Rule{}, fmt.Errorf("%q is not a CIDR, an IP or a host name", host)
		}
		r.Name = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return r, nil
}

func isIPv4(s string) bool { a, err := netip.ParseAddr(s); return err == nil && a.Is4() }

func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range s {
		if !(c == '-' || c == '.' || c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

func parsePorts(s string) ([2]uint16, error) {
	if s == "" {
		return [2]uint16{}, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || a == 0 || a > b {
		return [2]uint16{}, fmt.Errorf("bad port or range %q", s)
	}
	return [2]uint16{uint16(a), uint16(b)}, nil
}

func (r Rule) portMatches(port uint16) bool {
	return r.Ports == [2]uint16{} || r.Ports[0] <= port && port <= r.Ports[1]
}

// matchesName reports whether r is a name rule for name and port.
func (r Rule) matchesName(name string, port uint16) bool {
	if r.Name == "" || !r.portMatches(port) {
		return false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if sub, ok := strings.CutPrefix(r.Name, "*."); ok {
		return strings.HasSuffix(name, "."+sub)
	}
	return name == r.Name
}

// matchesAddr reports whether r is an address (or any-host) rule for ap.
func (r Rule) matchesAddr(ap netip.AddrPort) bool {
	if r.Name != "" || !r.portMatches(ap.Port()) {
		return false
	}
	return !r.Prefix.IsValid() || r.Prefix.Contains(ap.Addr().Unmap())
}

// ErrDenied is what a refused destination's error wraps.
var ErrDenied = errors.New("destination not allowed")

// Destinations is the rule set for destinations a client names.
type Destinations struct {
	Allow, Deny []Rule
	// Local reports whether a is one of this host's own addresses (see
	// LocalAddrs): a service bound to 0.0.0.0 on the forwarder's host is
	// no more the clients' than one on loopback.
	Local func(a netip.Addr) bool
	// Self reports whether ap is one of the forwarder's own listening or
	// admin addresses (a loop back into the forwarder).
	Self func(ap netip.AddrPort) bool
}

// CheckName applies the name rules to a destination as the client named it,
// before any resolution. allowed means an allow rule names it: the name is
// admitted, and CheckAddr with named set then lets its addresses pass an
// address allow list, but nothing else (deny rules, protected ranges).
func (d *Destinations) CheckName(name string, port uint16) (allowed bool, err error) {
	for _, r := range d.Deny {
		if r.matchesName(name, port) {
			return false, fmt.Errorf("%w: %s:%d matches a deny rule", ErrDenied, name, port)
		}
	}
	for _, r := range d.Allow {
		if r.matchesName(name, port) {
			return true, nil
		}
	}
	return false, nil
}

// CheckAddr applies the address rules and the protected ranges to the
// address actually dialled (after resolution: a name that resolves to a
// protected address is refused, so DNS rebinding does not pass, even for a
// name an allow rule admits). named says CheckName admitted the name the
// client asked for: its addresses need not be on an address allow list.
// Only an address rule opens a protected address: a name is whatever its
// DNS says, which the operator does not control.
func (d *Destinations) CheckAddr(ap netip.AddrPort, named bool) error {
	a := ap.Addr().Unmap()
	ap = netip.AddrPortFrom(a, ap.Port())
	for _, r := range d.Deny {
		if r.matchesAddr(ap) {
			return fmt.Errorf("%w: %s matches a deny rule", ErrDenied, ap)
		}
	}
	for _, r := range d.Allow {
		if r.matchesAddr(ap) {
			return nil
		}
	}
	if why := protected(a); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrDenied, ap, why)
	}
	if d.Local != nil && d.Local(a) {
		return fmt.Errorf("%w: %s is this host's own address", ErrDenied, ap)
	}
	if d.Self != nil && d.Self(ap) {
		return fmt.Errorf("%w: %s is this forwarder's own address (a loop)", ErrDenied, ap)
	}
	if !named && d.hasAddrAllows() {
		return fmt.Errorf("%w: %s matches no allow rule", ErrDenied, ap)
	}
	return nil
}

// hasAddrAllows reports whether there is an allow list of addresses (name
// allows alone leave other addresses open).
func (d *Destinations) hasAddrAllows() bool {
	for _, r := range d.Allow {
		if r.Name == "" {
			return true
		}
	}
	return false
}

// metadata are the cloud instance-metadata addresses.
var metadata = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

// protected says why a is refused unless an address rule opens it, or "".
func protected(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a == metadata[0] || a == metadata[1]:
		return "the cloud metadata address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a multicast or broadcast address"
	}
	return ""
}

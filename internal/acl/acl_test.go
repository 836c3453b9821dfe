// Rules parse as written, deny wins, address rules (not name rules) open protected ranges, and the defaults refuse what a stranger should not reach, this host included.

package acl

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.0/8:443", "203.0.113.5", "example.com", "*.example.com:8000-8100",
		":25", "[2001:db8::/32]:443", "2001:db8::1", "[::1]"} {
		if _, err := ParseRule(s); err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "10.0.0.0/33", "exa mple.com", "host:0", "host:9-1", "host:x", "[::1", "*"} {
		if _, err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) accepted", s)
		}
	}
}

func mustRules(t *testing.T, ss ...string) []Rule {
	t.Helper()
	var rs []Rule
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestDefaultsRefuseProtectedAddresses(t *testing.T) {
	self := netip.MustParseAddrPort("10.99.1.1:3128")
	d := &Destinations{Self: func(ap netip.AddrPort) bool { return ap == self }}
	for _, s := range []string{"127.0.0.1:80", "[::1]:80", "169.254.169.254:80", "[fd00:ec2::254]:80", "169.254.1.1:22",
		"[fe80::1]:80", "0.0.0.0:80", "224.0.0.1:80", "255.255.255.255:80", "[::ffff:127.0.0.1]:80", "10.99.1.1:3128"} {
		if err := d.CheckAddr(netip.MustParseAddrPort(s), false); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, want denied", s, err)
		}
	}
	for _, s := range []string{"10.99.2.2:80", "203.0.113.5:443", "10.99.1.1:80"} {
		if err := d.CheckAddr(netip.MustParseAddrPort(s), false); err != nil {
			t.Errorf("%s: %v, want allowed", s, err)
		}
	}
}

func TestRulesOrder(t *testing.T) {
	d := &Destinations{
		Allow: mustRules(t, "127.0.0.1:8080", "10.0.0.0/8", "*.example.com:443"),
		Deny:  mustRules(t, "10.6.6.0/24", "bad.example.com"),
	}
	for s, ok := range map[string]bool{
		"127.0.0.1:8080": true,  // explicitly allowed despite loopback
		"127.0.0.1:8081": false, // loopback, other port
		"10.1.2.3:22":    true,
		"10.6.6.6:80":    false, // deny wins
		"192.0.2.1:80":   false, // an address allow list exists
	} {
		err := d.CheckAddr(netip.MustParseAddrPort(s), false)
		if (err == nil) != ok {
			t.Errorf("CheckAddr(%s) = %v, want allowed=%v", s, err, ok)
		}
	}
	if ok, err := d.CheckName("www.example.com", 443); !ok || err != nil {
		t.Errorf("www.example.com:443: %v %v, want allowed by name", ok, err)
	}
	if ok, err := d.CheckName("bad.example.com", 443); ok || !errors.Is(err, ErrDenied) {
		t.Errorf("bad.example.com: %v %v, want denied", ok, err)
	}
	if ok, err := d.CheckName("example.com", 443); ok || err != nil {
		t.Errorf("example.com (not a subdomain): %v %v, want no name decision", ok, err)
	}
}

func TestClients(t *testing.T) {
	allow, _ := ParsePrefixes([]string{"10.0.0.0/8"})
	deny, _ := ParsePrefixes([]string{"10.6.6.6"})
	c := Clients{Allow: allow, Deny: deny}
	for s, ok := range map[string]bool{"10.1.1.1": true, "10.6.6.6": false, "192.0.2.1": false, "::ffff:10.1.1.1": true} {
		if c.Permits(netip.MustParseAddr(s)) != ok {
			t.Errorf("Permits(%s) != %v", s, ok)
		}
	}
	if !(Clients{}).Permits(netip.MustParseAddr("192.0.2.1")) {
		t.Error("no rules must permit everyone")
	}
}

// A name rule admits the name, not whatever address its DNS gives: a name
// that resolves to loopback or this host stays refused unless an address
// rule opens that address, while its other addresses pass an address allow
// list.
func TestNameRuleOpensNoProtectedAddress(t *testing.T) {
	local := netip.MustParseAddr("10.99.1.1")
	d := &Destinations{
		Allow: mustRules(t, "*.partner.test", "192.0.2.0/24", "127.0.0.1:8080"),
		Deny:  mustRules(t, "198.51.100.0/24"),
		Local: func(a netip.Addr) bool { return a == local },
	}
	if ok, err := d.CheckName("api.partner.test", 80); !ok || err != nil {
		t.Fatalf("api.partner.test: %v %v, want admitted by name", ok, err)
	}
	for s, ok := range map[string]bool{
		"127.0.0.1:80":          false, // loopback: a name rule does not open it
		"[::1]:80":              false,
		"169.254.169.254:80":    false,
		"10.99.1.1:80":          false, // this host
		"198.51.100.7:80":       false, // deny wins
		"127.0.0.1:8080":        true,  // an address rule opens it
		"203.0.113.5:80":        true,  // admitted by name past the address allow list
		"[2001:db8::5]:80":      true,
		"[::ffff:10.99.1.1]:80": false,
	} {
		if err := d.CheckAddr(netip.MustParseAddrPort(s), true); (err == nil) != ok {
			t.Errorf("CheckAddr(%s) for an admitted name = %v, want allowed=%v", s, err, ok)
		}
	}
	if err := d.CheckAddr(netip.MustParseAddrPort("203.0.113.5:80"), false); !errors.Is(err, ErrDenied) {
		t.Errorf("203.0.113.5 asked for by address: %v, want denied (not on the address allow list)", err)
	}
}

// This host's addresses are refused like loopback, and opened the same way.
func TestLocalAddressesRefusedByDefault(t *testing.T) {
	l := &LocalAddrs{list: func() ([]netip.Prefix, error) {
		return []netip.Prefix{netip.MustParsePrefix("10.99.1.1/32"), netip.MustParsePrefix("192.0.2.0/24")}, nil
	}}
	d := &Destinations{Local: l.Contains}
	for _, s := range []string{"10.99.1.1:8080", "192.0.2.77:22", "[::ffff:10.99.1.1]:8080"} {
		if err := d.CheckAddr(netip.MustParseAddrPort(s), false); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, want denied", s, err)
		}
	}
	if err := d.CheckAddr(netip.MustParseAddrPort("10.99.2.2:80"), false); err != nil {
		t.Errorf("10.99.2.2: %v, want allowed", err)
	}
	d.Allow = mustRules(t, "10.99.1.1:8080")
	if err := d.CheckAddr(netip.MustParseAddrPort("10.99.1.1:8080"), false); err != nil {
		t.Errorf("10.99.1.1:8080 with an address rule for it: %v, want allowed", err)
	}
}

// LocalAddrs reads the kernel's: every interface address is local, an
// address of the documentation range no interface holds is not.
func TestLocalAddrsReadsTheHost(t *testing.T) {
	var l LocalAddrs
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			t.Fatal(err)
		}
		if !l.Contains(p.Addr()) {
			t.Errorf("%s (an address of an interface) is not local", p.Addr())
		}
	}
	if !l.Contains(netip.MustParseAddr("127.0.0.53")) {
		t.Error("127.0.0.53 (in lo's local 127.0.0.0/8) is not local")
	}
	if a := netip.MustParseAddr("203.0.113.254"); l.Contains(a) {
		t.Errorf("%s is local", a)
	}
}

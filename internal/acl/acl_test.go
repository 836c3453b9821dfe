// Rules parse as written, deny wins, explicit allows open protected ranges, and the defaults refuse what a stranger should not reach.

package acl

import (
	"errors"
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
		if err := d.CheckAddr(netip.MustParseAddrPort(s)); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, want denied", s, err)
		}
	}
	for _, s := range []string{"10.99.2.2:80", "203.0.113.5:443", "10.99.1.1:80"} {
		if err := d.CheckAddr(netip.MustParseAddrPort(s)); err != nil {
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
		err := d.CheckAddr(netip.MustParseAddrPort(s))
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

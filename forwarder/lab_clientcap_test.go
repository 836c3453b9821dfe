// max_connections_per_client in the lab: an IPv6 client counts by its /64, so two addresses of one /64 share the cap, while an IPv4 client has its own.

package forwarder_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// dialFrom connects from local, an address of l's client namespace, to addr.
func dialFrom(tb testing.TB, l *lab.Lab, local netip.Addr, addr string) net.Conn {
	tb.Helper()
	var c net.Conn
	err := l.Client.Do(func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), Timeout: waitFor}
		c, err = d.DialContext(context.Background(), "tcp", addr)
		return err
	})
	if err != nil {
		tb.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// addClientAddr gives l's client a second address of its IPv6 /64.
func addClientAddr(tb testing.TB, l *lab.Lab, p netip.Prefix) {
	tb.Helper()
	h, err := l.Client.Netlink()
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName(lab.ClientIf)
	if err != nil {
		tb.Fatal(err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 128)}, Flags: unix.IFA_F_NODAD}
	if err := h.AddrAdd(link, a); err != nil {
		tb.Fatalf("add %s to the client: %v", p, err)
	}
}

func TestLabPerClientCapCountsIPv6By64(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9801))
	capped := tcpListener("capped", "[::]:9800", httplab.ServerAddr(l, 9801)) // IPv4 and IPv6
	capped.MaxConnectionsPerClient = 1
	lf := startLabForwarder(t, l, capped)
	second := netip.MustParsePrefix("fd99:1::3/64")
	addClientAddr(t, l, second)
	to6 := netip.AddrPortFrom(l.Cfg.FwdClient6.Addr(), 9800).String()

	first := dialFrom(t, l, l.Cfg.Client6.Addr(), to6)
	roundTrip(t, first, []byte("first"))
	if c := dialFrom(t, l, second.Addr(), to6); !closedAtOnce(t, c) {
		t.Errorf("a second client in %s was served past max_connections_per_client 1", l.Cfg.Client6.Masked())
	}
	v4 := dialFrom(t, l, l.Cfg.Client.Addr(), netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 9800).String())
	roundTrip(t, v4, []byte("another client"))
	if n := closedCount(lf.Forwarder, "max_connections_per_client"); n != 1 {
		t.Errorf("splicer_connections_closed_total{reason=max_connections_per_client} = %v, want 1", n)
	}
}

// Protected destinations through http-forward and socks5: loopback, the cloud metadata address, this host's own addresses and the forwarder's listeners are refused and counted, an allowed destination reached, and a name rule opens none of them.

package all_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
)

// Through http-forward and an unauthenticated socks5 listener with default rules, loopback (IPv4 and IPv6), the cloud metadata address and the forwarder's own listeners are refused (403, SOCKS reply 2) and counted, while an allowed destination is reached; a name rule opens no protected address.

// socksConnect greets addr without authentication, asks for dest and
// returns the reply code.
func socksConnect(tb testing.TB, addr string, dest netip.AddrPort) byte {
	tb.Helper()
	return socksAsk(tb, addr, socksAddr(dest.Addr()), dest.Port())
}

// socksConnectName is socksConnect to a domain name, which the forwarder
// resolves.
func socksConnectName(tb testing.TB, addr, name string, port uint16) byte {
	tb.Helper()
	return socksAsk(tb, addr, append([]byte{3, byte(len(name))}, name...), port)
}

// socksAsk sends a CONNECT request for the destination dest (address
// type and address, as RFC 1928 puts them) and port.
func socksAsk(tb testing.TB, addr string, dest []byte, port uint16) byte {
	tb.Helper()
	c := fwdtest.DialFor(tb, addr, 5*time.Second)
	defer c.Close()
	return socksAskOn(tb, c, dest, port)
}

// socksAskOn is socksAsk on a connection to the listener.
func socksAskOn(tb testing.TB, c net.Conn, dest []byte, port uint16) byte {
	tb.Helper()
	c.Write([]byte{5, 1, 0})
	greet := make([]byte, 2)
	if _, err := io.ReadFull(c, greet); err != nil || greet[1] != 0 {
		tb.Fatalf("greeting: %v %v", greet, err)
	}
	req := append([]byte{5, 1, 0}, dest...)
	req = append(req, byte(port>>8), byte(port))
	c.Write(req)
	reply := make([]byte, 2)
	if _, err := io.ReadFull(c, reply); err != nil {
		tb.Fatalf("reply: %v", err)
	}
	return reply[1]
}

// socksAddr is dest as a SOCKS request names an address.
func socksAddr(dest netip.Addr) []byte {
	if dest.Is6() {
		return append([]byte{4}, dest.AsSlice()...)
	}
	return append([]byte{1}, dest.AsSlice()...)
}

// proxyGet asks the http-forward listener at addr for url.
func proxyGet(tb testing.TB, addr, url string) int {
	tb.Helper()
	return proxyAskOn(tb, fwdtest.DialFor(tb, addr, 5*time.Second), "GET", url)
}

// proxyAskOn sends a request with method for target (a URL ending in
// /obj/10 for GET, host:port for CONNECT) on c, a connection to an
// http-forward listener, and returns the status.
func proxyAskOn(tb testing.TB, c net.Conn, method, target string) int {
	tb.Helper()
	defer c.Close()
	host := target
	if method == "GET" {
		host = strings.TrimSuffix(strings.TrimPrefix(target, "http://"), "/obj/10")
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func deniedCount(f *forwarder.Forwarder, listener string) float64 {
	families, _ := f.Metrics().Registry.Gather()
	for _, mf := range families {
		if mf.GetName() == "splicer_destinations_denied_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == listener {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestProtectedDestinationsRefused(t *testing.T) {
	allowed := fwdtest.HTTPOrigin(t) // on 127.0.0.1: reachable only by an explicit rule
	cfg := fwdtest.Config(t, `
listeners:
  - {name: fwd, listen: '127.0.0.1:0', proxy: http-forward}
  - {name: socks, listen: '127.0.0.1:0', proxy: socks5, socks5: {auth: none}}
  - {name: fwd-allowing, listen: '127.0.0.1:0', proxy: http-forward, destinations: {allow: ['%s']}}
`, allowed)
	f := fwdtest.Start(t, cfg.Listeners...)
	fwd, socks := f.Addr("fwd").String(), f.Addr("socks").String()
	_, originPort, _ := net.SplitHostPort(allowed)
	refused := []string{
		"127.0.0.1:" + originPort, "[::1]:" + originPort, "169.254.169.254:80",
		fwd, socks, // the forwarder's own listeners: a loop
	}
	for _, dest := range refused {
		if code := proxyGet(t, fwd, "http://"+dest+"/obj/10"); code != http.StatusForbidden {
			t.Errorf("http-forward to %s: %d, want 403", dest, code)
		}
		if rep := socksConnect(t, socks, netip.MustParseAddrPort(dest)); rep != 2 {
			t.Errorf("socks5 to %s: reply %d, want 2 (not allowed)", dest, rep)
		}
	}
	for _, l := range []string{"fwd", "socks"} {
		if n := deniedCount(f, l); n != float64(len(refused)) {
			t.Errorf("splicer_destinations_denied_total{listener=%q} = %v, want %d", l, n, len(refused))
		}
	}
	if code := proxyGet(t, f.Addr("fwd-allowing").String(), "http://"+allowed+"/obj/10"); code != http.StatusOK {
		t.Errorf("http-forward to an explicitly allowed loopback origin: %d, want 200", code)
	}
}

// countingOrigin serves the origin's HTTP protocol on a loopback port and
// returns its address and how many connections it accepted so far.
func countingOrigin(tb testing.TB) (addr string, accepted func() int64) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := origintest.Serve(tb, ln, origin.HTTP)
	return ln.Addr().String(), func() int64 { return srv.Stats()[origin.HTTP].Accepted }
}

// resolvesTo reports whether this host's resolver gives a for name.
func resolvesTo(name string, a netip.Addr) bool {
	addrs, _ := net.DefaultResolver.LookupNetIP(context.Background(), "ip", name)
	return slices.ContainsFunc(addrs, func(b netip.Addr) bool { return b.Unmap() == a })
}

// partnerOn127 dials as if DNS said every name under partner.test is
// 127.0.0.1, through the forwarder's own dialer (its socket checks
// included).
func partnerOn127(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".partner.test") {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	return sockopt.Dialer().DialContext(ctx, network, addr)
}

// A name rule admits the name, not whatever its DNS answers: a name that
// resolves to loopback is refused (http-forward GET and CONNECT, socks5)
// and nothing reaches the origin there, unless an address rule opens it.
func TestNameRuleOpensNoProtectedAddress(t *testing.T) {
	up, accepted := countingOrigin(t)
	_, port, _ := net.SplitHostPort(up)
	if !resolvesTo("localhost", netip.MustParseAddr("127.0.0.1")) {
		t.Skip("localhost does not resolve to 127.0.0.1 here")
	}
	cfg := fwdtest.Config(t, `
listeners:
  - {name: fwd, listen: '127.0.0.1:0', proxy: http-forward, http: {connect_ports: [%[1]s]}, destinations: {allow: ['*.partner.test']}}
  - {name: socks, listen: '127.0.0.1:0', proxy: socks5, socks5: {auth: none}, destinations: {allow: [localhost]}}
  - {name: fwd-opened, listen: '127.0.0.1:0', proxy: http-forward, destinations: {allow: ['*.partner.test', '127.0.0.1:%[1]s']}}
  - {name: socks-opened, listen: '127.0.0.1:0', proxy: socks5, socks5: {auth: none}, destinations: {allow: [localhost, '127.0.0.1:%[1]s']}}
`, port)
	f := fwdtest.StartWith(t, forwarder.Options{Dial: partnerOn127}, cfg.Listeners...)
	fwd, socks := f.Addr("fwd").String(), f.Addr("socks").String()
	name := "origin.partner.test:" + port

	if code := proxyGet(t, fwd, "http://"+name+"/obj/10"); code != http.StatusForbidden {
		t.Errorf("http-forward GET to %s (127.0.0.1): %d, want 403", name, code)
	}
	if code := proxyAskOn(t, fwdtest.DialFor(t, fwd, 5*time.Second), "CONNECT", name); code != http.StatusForbidden {
		t.Errorf("http-forward CONNECT to %s (127.0.0.1): %d, want 403", name, code)
	}
	p, _ := strconv.Atoi(port)
	if rep := socksConnectName(t, socks, "localhost", uint16(p)); rep != 2 {
		t.Errorf("socks5 to localhost:%s: reply %d, want 2 (not allowed)", port, rep)
	}
	if n := accepted(); n != 0 {
		t.Fatalf("the loopback origin accepted %d connections through name rules", n)
	}
	for _, l := range []string{"fwd", "socks"} {
		if deniedCount(f, l) == 0 {
			t.Errorf("splicer_destinations_denied_total{listener=%q} = 0", l)
		}
	}

	// An address rule for the origin opens it, names and all.
	if code := proxyGet(t, f.Addr("fwd-opened").String(), "http://"+name+"/obj/10"); code != http.StatusOK {
		t.Errorf("http-forward to %s with an address rule for 127.0.0.1:%s: %d, want 200", name, port, code)
	}
	if rep := socksConnectName(t, f.Addr("socks-opened").String(), "localhost", uint16(p)); rep != 0 {
		t.Errorf("socks5 to localhost:%s with an address rule for it: reply %d, want 0", port, rep)
	}
	testenv.Eventually(t, "the origin to count the connections of the opened listeners (2)", func() bool { return accepted() == 2 })
}

// This host's own addresses are refused like loopback: a service bound to every address of the forwarder's namespace is not reached through http-forward (GET, CONNECT) or socks5 at the forwarder's non-loopback addresses, unless an address rule opens one.

func TestLabHostAddressesRefused(t *testing.T) {
	l := httplab.New(t)
	const port = 8099
	ln, err := l.Fwd.Listen("tcp", "[::]:8099") // every address, IPv4 and IPv6
	if err != nil {
		t.Fatal(err)
	}
	srv := origintest.Serve(t, ln, origin.HTTP)
	accepted := func() int64 { return srv.Stats()[origin.HTTP].Accepted }
	cfg := fwdtest.Config(t, `
listeners:
  - {name: fwd, listen: '10.99.1.1:3128', proxy: http-forward, http: {connect_ports: [%[1]d]}}
  - {name: socks, listen: '10.99.1.1:1080', proxy: socks5, socks5: {auth: none}}
  - {name: opened, listen: '10.99.1.1:3129', proxy: http-forward, destinations: {allow: ['10.99.2.1:%[1]d']}}
`, port)
	f := httplab.Start(t, l, cfg.Listeners...)
	fwd, socks := f.Addr("fwd").String(), f.Addr("socks").String()

	for _, a := range []netip.Addr{l.Cfg.FwdClient.Addr(), l.Cfg.FwdServer.Addr(), l.Cfg.FwdClient6.Addr(), l.Cfg.FwdServer6.Addr()} {
		dest := netip.AddrPortFrom(a, port)
		if code := proxyAskOn(t, httplab.Dial(t, l, fwd), "GET", "http://"+dest.String()+"/obj/10"); code != http.StatusForbidden {
			t.Errorf("http-forward GET to %s: %d, want 403", dest, code)
		}
		if code := proxyAskOn(t, httplab.Dial(t, l, fwd), "CONNECT", dest.String()); code != http.StatusForbidden {
			t.Errorf("http-forward CONNECT to %s: %d, want 403", dest, code)
		}
		if rep := socksAskOn(t, httplab.Dial(t, l, socks), socksAddr(a), port); rep != 2 {
			t.Errorf("socks5 to %s: reply %d, want 2 (not allowed)", dest, rep)
		}
	}
	if n := accepted(); n != 0 {
		t.Fatalf("the service on the forwarder's host accepted %d connections through the proxies", n)
	}
	if n := f.Metric("splicer_destinations_denied_total", "listener", "socks"); n != 4 {
		t.Errorf("splicer_destinations_denied_total{listener=socks} = %v, want 4", n)
	}

	// An address rule opens one.
	dest := netip.AddrPortFrom(l.Cfg.FwdServer.Addr(), port).String()
	if code := proxyAskOn(t, httplab.Dial(t, l, f.Addr("opened").String()), "GET", "http://"+dest+"/obj/10"); code != http.StatusOK {
		t.Errorf("http-forward GET to %s with an address rule for it: %d, want 200", dest, code)
	}
	testenv.Eventually(t, "the service to count the opened listener's connection", func() bool { return accepted() == 1 })
}

// This host's own addresses are refused like loopback: a service bound to every address of the forwarder's namespace is not reached through http-forward (GET, CONNECT) or socks5 at the forwarder's non-loopback addresses, unless an address rule opens one.

package all_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/proxy/httpcore/httplab"
)

func TestLabHostAddressesRefused(t *testing.T) {
	l := httplab.New(t)
	const port = 8099
	ln, err := l.Fwd.Listen("tcp", "[::]:8099") // every address, IPv4 and IPv6
	if err != nil {
		t.Fatal(err)
	}
	srv := origin.New(nil)
	t.Cleanup(func() { srv.Close() })
	if err := srv.Serve(origin.HTTP, ln); err != nil {
		t.Fatal(err)
	}
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

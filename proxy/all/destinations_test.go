// Through http-forward and an unauthenticated socks5 listener with default rules, loopback (IPv4 and IPv6), the cloud metadata address and the forwarder's own listeners are refused (403, SOCKS reply 2) and counted, while an allowed destination is reached.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// socksConnect greets addr without authentication, asks for dest and
// returns the reply code.
func socksConnect(tb testing.TB, addr string, dest netip.AddrPort) byte {
	tb.Helper()
	c := dialFor(tb, addr, 5*time.Second)
	defer c.Close()
	c.Write([]byte{5, 1, 0})
	greet := make([]byte, 2)
	if _, err := io.ReadFull(c, greet); err != nil || greet[1] != 0 {
		tb.Fatalf("greeting: %v %v", greet, err)
	}
	req := []byte{5, 1, 0, 1}
	if dest.Addr().Is6() {
		req[3] = 4
	}
	req = append(req, dest.Addr().AsSlice()...)
	req = append(req, byte(dest.Port()>>8), byte(dest.Port()))
	c.Write(req)
	reply := make([]byte, 2)
	if _, err := io.ReadFull(c, reply); err != nil {
		tb.Fatalf("reply: %v", err)
	}
	return reply[1]
}

// proxyGet asks the http-forward listener at addr for url.
func proxyGet(tb testing.TB, addr, url string) int {
	tb.Helper()
	c := dialFor(tb, addr, 5*time.Second)
	defer c.Close()
	u := url[len("http://"):]
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", url, u[:len(u)-len("/obj/10")])
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
	allowed := httpOrigin(t) // on 127.0.0.1: reachable only by an explicit rule
	cfg := parseYAML(t, `
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

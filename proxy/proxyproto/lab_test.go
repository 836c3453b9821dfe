// Interoperability in the lab: curl through tcp listeners with proxy_protocol v1 and v2, over IPv4 and IPv6, to an nginx that accepts the header and echoes the addresses it read.

package proxyproto_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/lab"
)

// startNginx runs nginx in the lab's server namespace, answering every
// request on port with the PROXY protocol addresses it parsed:
// "client-addr client-port server-addr server-port".
func startNginx(tb testing.TB, l *lab.Lab, port int) {
	tb.Helper()
	server := fmt.Sprintf(`		listen %[1]d proxy_protocol;
		listen [::]:%[1]d proxy_protocol;
		return 200 "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port";`, port)
	httplab.StartNginx(tb, l, tb.TempDir(), server, fmt.Sprintf("10.99.2.2:%d", port))
}

func TestLabNginxReadsHeader(t *testing.T) {
	l := httplab.New(t)
	const nginxPort = 8001
	startNginx(t, l, nginxPort)
	cases := []struct {
		name, version, listen, upstream, client string
	}{
		{"v1-ipv4", "v1", "10.99.1.1:7101", "10.99.2.2", "10.99.1.2"},
		{"v2-ipv4", "v2", "10.99.1.1:7102", "10.99.2.2", "10.99.1.2"},
		{"v1-ipv6", "v1", "[fd99:1::1]:7103", "[fd99:2::2]", "fd99:1::2"},
		{"v2-ipv6", "v2", "[fd99:1::1]:7104", "[fd99:2::2]", "fd99:1::2"},
	}
	var listeners []config.Listener
	for _, c := range cases {
		lc := httplab.Listener(c.name, c.listen, "tcp")
		lc.Upstream = config.Servers(fmt.Sprintf("%s:%d", c.upstream, nginxPort))
		lc.ProxyProtocol = c.version
		listeners = append(listeners, lc)
	}
	f := httplab.Start(t, l, listeners...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := httplab.Curl(t, l, "-f", "http://"+f.Addr(c.name).String()+"/")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("nginx read: %s", out)
			fields := strings.Fields(string(out))
			listen := netip.MustParseAddrPort(c.listen)
			if len(fields) != 4 || fields[0] != c.client || fields[1] == "0" ||
				fields[2] != listen.Addr().String() || fields[3] != fmt.Sprint(listen.Port()) {
				t.Errorf("nginx read the header as %q; want client %s, some port, server %s", out, c.client, listen)
			}
		})
	}
}

// TestLabHealthChecksSendTheHeader: an nginx that takes the PROXY protocol
// on every connection refuses a health check without a header. The checks
// of listeners with proxy_protocol send one (v1's UNKNOWN, v2's LOCAL),
// as HAProxy's do, and find the server healthy: tcp with v1 and v2 (a GET
// check), http-reverse with v2; curl goes through each. A listener without
// proxy_protocol in front of the same nginx finds it unhealthy: the
// checks ran, and the header is what passed them.
func TestLabHealthChecksSendTheHeader(t *testing.T) {
	l := httplab.New(t)
	const nginxPort = 8002
	startNginx(t, l, nginxPort)
	server := fmt.Sprintf("10.99.2.2:%d", nginxPort)
	check := &config.HealthCheck{Path: "/", Interval: config.Duration(200 * time.Millisecond), Timeout: config.Duration(150 * time.Millisecond)}
	var listeners []config.Listener
	for i, c := range []struct{ name, kind, version string }{
		{"tcp-v1", "tcp", "v1"}, {"tcp-v2", "tcp", "v2"}, {"rev-v2", "http-reverse", "v2"}, {"tcp-none", "tcp", ""},
	} {
		lc := httplab.Listener(c.name, fmt.Sprintf("10.99.1.1:%d", 7111+i), c.kind)
		lc.ProxyProtocol = c.version
		if c.kind == "http-reverse" {
			lc.Pools = []config.Pool{{Name: "p", Servers: config.Servers(server), HealthCheck: check}}
			lc.Routes = []config.Route{{Pool: "p"}}
		} else {
			lc.Upstream, lc.HealthCheck = config.Servers(server), check
		}
		listeners = append(listeners, lc)
	}
	f := httplab.Start(t, l, listeners...)
	healthy := func(name, pool string) float64 {
		return f.Metric("splicer_upstream_healthy", "listener", name, "pool", pool, "server", server)
	}
	deadline := time.Now().Add(10 * time.Second)
	for healthy("tcp-none", "upstream") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the check without a header never failed: did the checks run?")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // more checks of every listener
	for _, c := range []struct{ name, pool string }{{"tcp-v1", "upstream"}, {"tcp-v2", "upstream"}, {"rev-v2", "p"}} {
		if got := healthy(c.name, c.pool); got != 1 {
			t.Errorf("%s: splicer_upstream_healthy %v, want 1: its checks sent no header nginx took", c.name, got)
			continue
		}
		if _, err := httplab.Curl(t, l, "-f", "http://"+f.Addr(c.name).String()+"/"); err != nil {
			t.Errorf("curl through %s: %v", c.name, err)
		}
	}
}

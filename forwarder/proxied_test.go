// The client a trusted balancer's PROXY header names is the client of the access rules, the per-client cap and the header sent on upstream.

package forwarder_test

import (
	"bufio"
	"io"
	"net"
	"testing"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// headerEcho serves on loopback: it reads each connection's PROXY header,
// sends its source to sources, and echoes the rest. It returns its address.
func headerEcho(tb testing.TB, sources chan<- string) string {
	tb.Helper()
	return fwdtest.ReadingBackend(tb, func(c net.Conn, r *bufio.Reader) {
		info, err := proxyproto.Read(r)
		if err != nil {
			sources <- "error: " + err.Error()
			return
		}
		sources <- info.Source.String()
		io.Copy(c, r)
	})
}

// dialWithHeader connects to addr from loopback, the trusted balancer, and
// sends a v1 header naming client.
func dialWithHeader(tb testing.TB, addr, client string) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	ap := c.LocalAddr().(*net.TCPAddr)
	src, err := net.ResolveTCPAddr("tcp", client)
	if err != nil {
		tb.Fatal(err)
	}
	hdr, _ := proxyproto.Header("v1", src, &net.TCPAddr{IP: ap.IP, Port: 80})
	c.Write(hdr)
	return c
}

func TestProxiedClientIsTheClient(t *testing.T) {
	sources := make(chan string, 4)
	lc := loopListener("lb", "127.0.0.1:0", headerEcho(t, sources), copyengine.Name)
	lc.AcceptProxyProtocol = true
	lc.ProxyProtocolFrom = []string{"127.0.0.1/32"}
	lc.DenyClients = []string{"203.0.113.0/24"}
	lc.MaxConnectionsPerClient = 1
	lc.ProxyProtocol = "v2"
	f := fwdtest.Start(t, lc)
	addr := f.Addr("lb").String()

	if c := dialWithHeader(t, addr, "203.0.113.7:1111"); !closedAtOnce(t, c) {
		t.Error("a client in deny_clients, behind a trusted balancer, was served")
	}
	first := dialWithHeader(t, addr, "198.51.100.9:2222")
	roundTrip(t, first, []byte("first"))
	if got := <-sources; got != "198.51.100.9:2222" {
		t.Errorf("the upstream's header named %s, want the balancer's client 198.51.100.9:2222", got)
	}
	if c := dialWithHeader(t, addr, "198.51.100.9:3333"); !closedAtOnce(t, c) {
		t.Error("a second connection of one client past max_connections_per_client 1 was served")
	}
	other := dialWithHeader(t, addr, "198.51.100.10:2222")
	roundTrip(t, other, []byte("other"))
	for reason, want := range map[string]float64{"client_denied": 1, "max_connections_per_client": 1} {
		if n := closedCount(f, reason); n != want {
			t.Errorf("splicer_connections_closed_total{reason=%q} = %v, want %v", reason, n, want)
		}
	}
}

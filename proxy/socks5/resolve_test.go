// Tests the domain-name path with a resolver hook: a name only the hook knows, every address tried in turn.

package socks5

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/proxy/proxytest"
)

func TestConnectResolvesWithHook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	port := netip.MustParseAddrPort(ln.Addr().String()).Port()
	var asked string
	p := &Proxy{Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
		asked = host
		// The first address refuses (nothing listens on 127.0.0.2 at that
		// port); the proxy must go on to the second.
		return []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
	}}
	var dialed []string
	s := &proxytest.Session{P: engine.NewPair(1, "t", nil), DialFunc: func(ctx context.Context, addr string) (*net.TCPConn, error) {
		dialed = append(dialed, addr)
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}}
	up, err := p.connect(context.Background(), s, destination{name: "origin.lab", port: port}, time.Second)
	if err != nil {
		t.Fatalf("connect: %v (dialed %v)", err, dialed)
	}
	defer up.Close()
	if asked != "origin.lab" {
		t.Errorf("resolver asked for %q", asked)
	}
	want := []string{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port).String(), ln.Addr().String()}
	if len(dialed) != 2 || dialed[0] != want[0] || dialed[1] != want[1] {
		t.Errorf("dialed %v, want %v (IPv4-mapped unmapped)", dialed, want)
	}
	if b, _ := io.ReadAll(up); string(b) != "hello" {
		t.Errorf("read %q from the upstream", b)
	}
}

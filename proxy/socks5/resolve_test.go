// Tests the domain-name path with a resolver hook: a name only the hook knows, every address tried in turn.

package socks5

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
)

// dialSession is the part of proxy.Session the connect path uses: a real
// dial that records the upstream, as the forwarder's does.
type dialSession struct {
	pair   *engine.Pair
	dialed []string
}

func (s *dialSession) Pair() *engine.Pair        { return s.pair }
func (s *dialSession) Stopping() <-chan struct{} { return nil }
func (s *dialSession) Log() *slog.Logger         { return slog.New(slog.DiscardHandler) }
func (s *dialSession) Dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	s.dialed = append(s.dialed, addr)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s.pair.SetUpstream(c.(*net.TCPConn))
	return c.(*net.TCPConn), nil
}
func (s *dialSession) Splice(context.Context, engine.Options) (engine.Result, error) {
	panic("not used")
}
func (s *dialSession) Forward(context.Context, engine.Options) (engine.Result, error) {
	panic("not used")
}
func (s *dialSession) NoSplice(string) {}

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
	s := &dialSession{pair: engine.NewPair(1, "t", nil)}
	up, err := p.connect(context.Background(), s, destination{name: "origin.lab", port: port}, time.Second)
	if err != nil {
		t.Fatalf("connect: %v (dialed %v)", err, s.dialed)
	}
	defer up.Close()
	if asked != "origin.lab" {
		t.Errorf("resolver asked for %q", asked)
	}
	want := []string{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port).String(), ln.Addr().String()}
	if len(s.dialed) != 2 || s.dialed[0] != want[0] || s.dialed[1] != want[1] {
		t.Errorf("dialed %v, want %v (IPv4-mapped unmapped)", s.dialed, want)
	}
	if b, _ := io.ReadAll(up); string(b) != "hello" {
		t.Errorf("read %q from the upstream", b)
	}
}

// Loopback tests through a real forwarder: every reply code a raw SOCKS5 client can provoke, authentication, domain names, PROXY protocol and bad input.

package socks5_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/proxyproto"
	"github.com/splicer/splicer/proxy/socks5"
	"github.com/splicer/splicer/proxy/socks5/passwd"
)

const waitFor = 10 * time.Second

// socksListener is a socks5 listener on loopback; users are name, password pairs.
func socksListener(tb testing.TB, users ...string) config.Listener {
	tb.Helper()
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Proxy = "socks", "127.0.0.1:0", "socks5"
	lc.SOCKS5 = &config.SOCKS5{}
	if len(users) == 0 {
		lc.SOCKS5.Auth = "none"
	}
	// The tests' destinations are on loopback, which is refused by default.
	lc.Destinations = &config.Destinations{Allow: []string{"127.0.0.0/8", "::1"}}
	for i := 0; i+1 < len(users); i += 2 {
		h, err := passwd.New(users[i+1], passwd.MinIterations)
		if err != nil {
			tb.Fatal(err)
		}
		lc.SOCKS5.Users = append(lc.SOCKS5.Users, config.SOCKS5User{Name: users[i], PasswordHash: h})
	}
	return lc
}

// echoOrigin is an echo server that counts the connections it accepted.
type echoOrigin struct {
	addr     string
	accepted atomic.Int64
}

// startEcho runs an echo server on addr; with header set, it first reads a
// PROXY protocol header from each connection and sends what it says there.
func startEcho(tb testing.TB, network, addr string, header chan<- proxyproto.Info) *echoOrigin {
	tb.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	o := &echoOrigin{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.accepted.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if header != nil {
					info, err := proxyproto.Read(r)
					if err != nil {
						return
					}
					header <- info
				}
				io.Copy(c, r)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return o
}

// dial connects a raw client to the proxy.
func dial(tb testing.TB, f *forwarder.Forwarder) *net.TCPConn {
	tb.Helper()
	c, err := net.Dial("tcp", f.Addr("socks").String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitFor))
	return c.(*net.TCPConn)
}

// greet sends a greeting offering methods and returns the chosen method.
func greet(tb testing.TB, c net.Conn, methods ...byte) byte {
	tb.Helper()
	c.Write(append([]byte{5, byte(len(methods))}, methods...))
	var b [2]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		tb.Fatalf("greeting reply: %v", err)
	}
	if b[0] != 5 {
		tb.Fatalf("greeting reply version %d", b[0])
	}
	return b[1]
}

// login sends RFC 1929 credentials and returns the status.
func login(tb testing.TB, c net.Conn, user, pass string) byte {
	tb.Helper()
	msg := append([]byte{1, byte(len(user))}, user...)
	msg = append(append(msg, byte(len(pass))), pass...)
	c.Write(msg)
	var b [2]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		tb.Fatalf("auth reply: %v", err)
	}
	return b[1]
}

// request sends a request with a raw address (atyp, address bytes) and
// returns the reply code and bound address.
func request(tb testing.TB, c net.Conn, cmd, atyp byte, addr []byte, port uint16) (byte, netip.AddrPort) {
	tb.Helper()
	msg := append([]byte{5, cmd, 0, atyp}, addr...)
	c.Write(binary.BigEndian.AppendUint16(msg, port))
	return readReply(tb, c)
}

func readReply(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
	tb.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		tb.Fatalf("reply: %v", err)
	}
	n := 4
	if hdr[3] == 4 {
		n = 16
	} else if hdr[3] != 1 {
		tb.Fatalf("reply address type %d", hdr[3])
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("reply address: %v", err)
	}
	a, _ := netip.AddrFromSlice(b[:n])
	return hdr[1], netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[n:]))
}

// connectTo sends a CONNECT for addr (IP:port).
func connectTo(tb testing.TB, c net.Conn, addr string) (byte, netip.AddrPort) {
	tb.Helper()
	ap := netip.MustParseAddrPort(addr)
	atyp := byte(1)
	if ap.Addr().Is6() {
		atyp = 4
	}
	return request(tb, c, 1, atyp, ap.Addr().AsSlice(), ap.Port())
}

// echoes checks that the tunnel carries msg both ways.
func echoes(tb testing.TB, c *net.TCPConn, msg []byte) {
	tb.Helper()
	go func() { c.Write(msg); c.CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		tb.Fatalf("through the tunnel: %d of %d bytes back, err %v", len(got), len(msg), err)
	}
}

// closedWithoutData checks that the proxy closes c without sending anything more.
func closedWithoutData(tb testing.TB, c net.Conn) {
	tb.Helper()
	b, err := io.ReadAll(c)
	if len(b) > 0 || (err != nil && !errors.Is(err, syscall.ECONNRESET)) {
		tb.Fatalf("after the refusal: read %x, %v; want the connection closed", b, err)
	}
}

func TestConnectWithoutAuth(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	f := fwdtest.Start(t, socksListener(t))
	c := dial(t, f)
	if m := greet(t, c, 0x02, 0x00); m != 0x00 {
		t.Fatalf("method = %#x, want 0x00 (no authentication)", m)
	}
	rep, bound := connectTo(t, c, o.addr)
	if rep != socks5.RepSucceeded || !bound.Addr().IsLoopback() || bound.Port() == 0 {
		t.Fatalf("reply %#x bound %v, want success with the upstream socket's address", rep, bound)
	}
	echoes(t, c, bytes.Repeat([]byte("socks"), 200000))
}

func TestConnectIPv6(t *testing.T) {
	o := startEcho(t, "tcp6", "[::1]:0", nil)
	f := fwdtest.Start(t, socksListener(t))
	c := dial(t, f)
	greet(t, c, 0x00)
	if rep, bound := connectTo(t, c, o.addr); rep != socks5.RepSucceeded || bound.Addr() != netip.IPv6Loopback() {
		t.Fatalf("reply %#x bound %v, want success bound to ::1", rep, bound)
	}
	echoes(t, c, []byte("over IPv6"))
}

func TestConnectDomainName(t *testing.T) {
	o := startEcho(t, "tcp4", "127.0.0.1:0", nil)
	port := netip.MustParseAddrPort(o.addr).Port()
	f := fwdtest.Start(t, socksListener(t))
	c := dial(t, f)
	greet(t, c, 0x00)
	// localhost is in every /etc/hosts; its ::1 entry, if tried first, is
	// refused and the proxy goes on to 127.0.0.1.
	if rep, _ := request(t, c, 1, 3, append([]byte{9}, "localhost"...), port); rep != socks5.RepSucceeded {
		t.Fatalf("reply %#x, want success", rep)
	}
	echoes(t, c, []byte("by name"))

	c = dial(t, f)
	greet(t, c, 0x00)
	if rep, _ := request(t, c, 1, 3, append([]byte{14}, "no-such.invalid"...), port); rep != socks5.RepHostUnreachable {
		t.Fatalf("reply to a name that does not resolve: %#x, want %#x host unreachable", rep, socks5.RepHostUnreachable)
	}
}

func TestUserPassword(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	f := fwdtest.Start(t, socksListener(t, "alice", "wonderland", "bob", "builder"))

	t.Run("good", func(t *testing.T) {
		c := dial(t, f)
		if m := greet(t, c, 0x00, 0x02); m != 0x02 {
			t.Fatalf("method = %#x, want 0x02 (username/password)", m)
		}
		if st := login(t, c, "bob", "builder"); st != 0 {
			t.Fatalf("auth status %#x, want 0", st)
		}
		if rep, _ := connectTo(t, c, o.addr); rep != socks5.RepSucceeded {
			t.Fatalf("reply %#x", rep)
		}
		echoes(t, c, []byte("authenticated"))
	})
	before := o.accepted.Load()
	for _, bad := range [][2]string{{"alice", "builder"}, {"mallory", "wonderland"}, {"alice", ""}} {
		t.Run("bad "+bad[0]+"/"+bad[1], func(t *testing.T) {
			c := dial(t, f)
			greet(t, c, 0x02)
			if st := login(t, c, bad[0], bad[1]); st == 0 {
				t.Fatal("auth succeeded")
			}
			closedWithoutData(t, c)
		})
	}
	if n := o.accepted.Load() - before; n != 0 {
		t.Errorf("the origin saw %d connections from failed logins, want 0", n)
	}
	t.Run("no acceptable method", func(t *testing.T) {
		c := dial(t, f)
		if m := greet(t, c, 0x00); m != 0xFF {
			t.Fatalf("method = %#x, want 0xFF: users are configured, so no-auth is not acceptable", m)
		}
		closedWithoutData(t, c)
	})
}

func TestRequestErrors(t *testing.T) {
	closedAddr := closedPort(t)
	f := fwdtest.Start(t, socksListener(t))
	for _, c := range []struct {
		name string
		send func(tb testing.TB, c net.Conn) (byte, netip.AddrPort)
		want byte
	}{
		{"BIND", func(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
			return request(tb, c, 2, 1, []byte{127, 0, 0, 1}, 80)
		}, socks5.RepCommandNotSupported},
		{"UDP ASSOCIATE", func(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
			return request(tb, c, 3, 1, []byte{0, 0, 0, 0}, 0)
		}, socks5.RepCommandNotSupported},
		{"unknown command", func(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
			return request(tb, c, 9, 3, append([]byte{1}, 'x'), 80)
		}, socks5.RepCommandNotSupported},
		{"unknown address type", func(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
			return request(tb, c, 1, 7, []byte{1, 2, 3, 4, 5, 6}, 80)
		}, socks5.RepAddrTypeNotSupported},
		{"connection refused", func(tb testing.TB, c net.Conn) (byte, netip.AddrPort) {
			return connectTo(tb, c, closedAddr)
		}, socks5.RepConnectionRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, f)
			greet(t, conn, 0x00)
			rep, bound := c.send(t, conn)
			if rep != c.want || bound != netip.AddrPortFrom(netip.IPv4Unspecified(), 0) {
				t.Fatalf("reply %#x bound %v, want %#x with 0.0.0.0:0", rep, bound, c.want)
			}
			closedWithoutData(t, conn)
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ln.Close()
	return ln.Addr().String()
}

func TestNotSOCKS5(t *testing.T) {
	f := fwdtest.Start(t, socksListener(t))
	for name, greeting := range map[string][]byte{
		"SOCKS4":       {4, 1, 0, 80, 127, 0, 0, 1, 0},
		"HTTP":         []byte("GET / HTTP/1.1\r\n\r\n"),
		"request v4":   {5, 1, 0, 4, 1, 0, 1, 127, 0, 0, 1, 0, 80},
		"empty method": {5, 0},
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, f)
			c.Write(greeting)
			b, err := io.ReadAll(c)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read: %v", err)
			}
			// A SOCKS5 greeting gets its method reply (or 0xFF) before the close.
			if name == "SOCKS4" || name == "HTTP" {
				if len(b) != 0 {
					t.Fatalf("got %x, want the connection closed without a reply", b)
				}
			} else if len(b) > 2 {
				t.Fatalf("got %x, want at most the method reply before the close", b)
			}
		})
	}
	// "empty method" is a well-formed greeting that offers nothing
	// acceptable; the other three break the protocol.
	waitClosed(t, f, "bad_request", 3)
}

// waitClosed waits until n pairs were counted closed for reason.
func waitClosed(tb testing.TB, f *forwarder.Forwarder, reason string, n float64) {
	tb.Helper()
	var got float64
	for deadline := time.Now().Add(waitFor); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var m dto.Metric
		f.Metrics().Closed.WithLabelValues("socks", reason).Write(&m)
		got = m.GetCounter().GetValue()
		if got >= n {
			break
		}
	}
	if got != n {
		tb.Errorf("splicer_connections_closed_total{reason=%q} = %v, want %v", reason, got, n)
	}
}

// TestGarbageDoesNotDisturbOtherPairs keeps a tunnel open while other
// clients send garbage, then checks the tunnel still carries data.
func TestGarbageDoesNotDisturbOtherPairs(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	f := fwdtest.Start(t, socksListener(t))
	good := dial(t, f)
	greet(t, good, 0x00)
	if rep, _ := connectTo(t, good, o.addr); rep != socks5.RepSucceeded {
		t.Fatalf("reply %#x", rep)
	}
	good.Write([]byte("before"))
	if b := readN(t, good, 6); string(b) != "before" {
		t.Fatalf("echo %q", b)
	}
	for i := range 20 {
		c := dial(t, f)
		c.Write(bytes.Repeat([]byte{byte(i), 0xff, 5}, 100*i+1))
		io.ReadAll(c)
	}
	echoes(t, good, []byte("after the garbage"))
}

func readN(tb testing.TB, c net.Conn, n int) []byte {
	tb.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestHandshakeTimeout(t *testing.T) {
	lc := socksListener(t)
	lc.SOCKS5.HandshakeTimeout = config.Duration(200 * time.Millisecond)
	f := fwdtest.Start(t, lc)
	c := dial(t, f)
	c.Write([]byte{5, 1}) // and never the methods
	start := time.Now()
	closedWithoutData(t, c)
	if time.Since(start) > waitFor/2 {
		t.Errorf("a stalled handshake was closed after %v", time.Since(start))
	}
}

func TestProxyProtocolToDestination(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		t.Run(v, func(t *testing.T) {
			headers := make(chan proxyproto.Info, 1)
			o := startEcho(t, "tcp", "127.0.0.1:0", headers)
			lc := socksListener(t)
			lc.ProxyProtocol = v
			f := fwdtest.Start(t, lc)
			c := dial(t, f)
			greet(t, c, 0x00)
			if rep, _ := connectTo(t, c, o.addr); rep != socks5.RepSucceeded {
				t.Fatalf("reply %#x", rep)
			}
			echoes(t, c, []byte("after the header"))
			info := <-headers
			want := proxyproto.Info{Version: int(v[1] - '0'), Source: c.LocalAddr().(*net.TCPAddr).AddrPort(),
				Destination: c.RemoteAddr().(*net.TCPAddr).AddrPort()}
			if info != want {
				t.Errorf("header = %+v, want %+v", info, want)
			}
		})
	}
}

// TestFlowsShowSplice checks that a tunnel is spliced once connected.
func TestFlowsShowSplice(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	lc := socksListener(t)
	lc.Engine = "pipe"
	f := fwdtest.Start(t, lc)
	c := dial(t, f)
	greet(t, c, 0x00)
	connectTo(t, c, o.addr)
	deadline := time.Now().Add(waitFor)
	for {
		fl := f.Flows().Snapshot()
		if len(fl) == 1 && fl[0].State == engine.StateSpliced.String() && fl[0].Engine == "pipe" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/flows = %+v, want one pair spliced by pipe", fl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	echoes(t, c, []byte(strings.Repeat("x", 1000)))
}

// TestBytesBeforeTheReply sends greeting, request and the first payload
// bytes in one write, as optimistic clients do: the handshake must not read
// past the request, so the payload reaches the destination.
func TestBytesBeforeTheReply(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	f := fwdtest.Start(t, socksListener(t))
	c := dial(t, f)
	ap := netip.MustParseAddrPort(o.addr)
	msg := []byte{5, 1, 0, 5, 1, 0, 1}
	msg = append(msg, ap.Addr().AsSlice()...)
	msg = binary.BigEndian.AppendUint16(msg, ap.Port())
	c.Write(append(msg, "early bytes"...))
	if b := readN(t, c, 2); b[1] != 0 {
		t.Fatalf("method reply %x", b)
	}
	if rep, _ := readReply(t, c); rep != socks5.RepSucceeded {
		t.Fatalf("reply %#x", rep)
	}
	if b := readN(t, c, len("early bytes")); string(b) != "early bytes" {
		t.Fatalf("echoed %q", b)
	}
}

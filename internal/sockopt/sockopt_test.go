// Tests on live socket pairs: the MSS a dial context asks for is what the SYN announces, and AnnouncedMSS recovers a SYN's MSS from the accepted socket.

package sockopt_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestAnnouncedMSSOnLoopback: over loopback (no privileges needed, the
// host's timestamps on), the SYN announces the MSS the dial context asks
// for, and AnnouncedMSS on the accepted socket gives back exactly what the
// SYN carried. Loopback's own MSS (65495) is the exception: the kernel
// bounds a socket's MSS by half the largest window the peer offered (64 KiB
// in a SYN), and AnnouncedMSS gives that smaller figure.
func TestAnnouncedMSSOnLoopback(t *testing.T) {
	for _, mss := range []int{0, sockopt.MinMSS, 536, 1000, 1360, 9000} {
		t.Run(fmt.Sprint(mss), func(t *testing.T) {
			ln := listenSavingSYN(t, nil, "127.0.0.1:0")
			syn, announced := connect(t, nil, ln, mss)
			if mss != 0 && syn != mss {
				t.Errorf("SYN announced MSS %d, want the %d asked for", syn, mss)
			}
			switch {
			case mss == 0 && (announced > syn || announced < 32<<10):
				t.Errorf("AnnouncedMSS = %d, the SYN carried %d: want half a 64 KiB window", announced, syn)
			case mss != 0 && announced != syn:
				t.Errorf("AnnouncedMSS = %d, the SYN carried %d", announced, syn)
			}
		})
	}
}

// TestAnnouncedMSSWithAndWithoutTimestamps: in a lab whose client link has
// MTU 1400, with the client's timestamps on and off, AnnouncedMSS on the
// forwarder's accepted socket equals the MSS in the client's SYN: the
// route's (1360) or a smaller one the client asked for.
func TestAnnouncedMSSWithAndWithoutTimestamps(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	if err := l.SetMTU(l.ClientLink(), 1400); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []bool{true, false} {
		value := "0"
		if ts {
			value = "1"
		}
		if err := l.Client.Sysctl("net.ipv4.tcp_timestamps", value); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ ask, want int }{{0, 1360}, {1000, 1000}, {1360, 1360}} {
			t.Run(fmt.Sprintf("timestamps=%v/mss=%d", ts, tc.ask), func(t *testing.T) {
				addr := netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 0).String()
				ln := listenSavingSYN(t, l.Fwd, addr)
				syn, announced := connect(t, l.Client, ln, tc.ask)
				if syn != tc.want || announced != tc.want {
					t.Errorf("SYN announced %d, AnnouncedMSS %d; want both %d", syn, announced, tc.want)
				}
			})
		}
	}
}

func TestWithMSSIgnoresWhatTheKernelRefuses(t *testing.T) {
	for _, mss := range []int{-1, 0, sockopt.MinMSS - 1, sockopt.MaxMSS + 1} {
		if got := sockopt.MSS(sockopt.WithMSS(context.Background(), mss)); got != 0 {
			t.Errorf("WithMSS(%d) asks for %d, want nothing", mss, got)
		}
	}
	if got := sockopt.MSS(sockopt.WithMSS(context.Background(), 1200)); got != 1200 {
		t.Errorf("WithMSS(1200) asks for %d", got)
	}
}

// TestWithRcvBufBoundsTheSocket: a dial under WithRcvBuf connects a socket
// whose SO_RCVBUF reads back as asked (the kernel doubles what it is
// given), with MSS and receive buffer both set when both are asked; 0
// asks for nothing and leaves the kernel's default.
func TestWithRcvBufBoundsTheSocket(t *testing.T) {
	ln := testenv.ListenLoopback(t)
	testenv.HoldEach(t, ln, func(net.Conn) {})
	rcvBuf := func(ctx context.Context) int {
		t.Helper()
		c, err := sockopt.Dialer().DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rc, _ := c.(*net.TCPConn).SyscallConn()
		var n int
		var gerr error
		rc.Control(func(fd uintptr) { n, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		return n
	}
	def := rcvBuf(context.Background())
	for _, want := range []int{64 << 10, 256 << 10} {
		if got := rcvBuf(sockopt.WithRcvBuf(context.Background(), want)); got != want {
			t.Errorf("WithRcvBuf(%d): SO_RCVBUF %d", want, got)
		}
	}
	if got := rcvBuf(sockopt.WithRcvBuf(sockopt.WithMSS(context.Background(), 1200), 128<<10)); got != 128<<10 {
		t.Errorf("with an MSS too: SO_RCVBUF %d, want %d", got, 128<<10)
	}
	if got := rcvBuf(sockopt.WithRcvBuf(context.Background(), 0)); got != def {
		t.Errorf("WithRcvBuf(0): SO_RCVBUF %d, want the default %d", got, def)
	}
}

// listenSavingSYN listens on addr, in ns if not nil, with TCP_SAVE_SYN so
// that accepted sockets hand over their client's SYN.
func listenSavingSYN(tb testing.TB, ns *lab.NS, addr string) net.Listener {
	tb.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_SAVE_SYN, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	listen := func() (ln net.Listener, err error) {
		ln, err = lc.Listen(context.Background(), "tcp", addr)
		return ln, err
	}
	var ln net.Listener
	var err error
	if ns == nil {
		ln, err = listen()
	} else {
		err = ns.Do(func() (err error) { ln, err = listen(); return err })
	}
	if err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// connect dials ln (from ns if not nil) asking for mss (0: none) and
// returns the MSS option of the SYN the listener saved and AnnouncedMSS of
// the accepted socket.
func connect(tb testing.TB, ns *lab.NS, ln net.Listener, mss int) (syn, announced int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = sockopt.WithMSS(ctx, mss)
	var c net.Conn
	var err error
	if ns == nil {
		c, err = sockopt.Dialer().DialContext(ctx, "tcp", ln.Addr().String())
	} else {
		c, err = ns.Dial(ctx, "tcp", ln.Addr().String())
	}
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		tb.Fatalf("accept: %v", err)
	}
	defer a.Close()
	syn = synMSS(tb, a.(*net.TCPConn))
	if announced, err = sockopt.AnnouncedMSS(a.(*net.TCPConn)); err != nil {
		tb.Fatal(err)
	}
	return syn, announced
}

// synMSS reads the saved SYN (IP and TCP headers) of an accepted socket
// and returns its MSS option.
func synMSS(tb testing.TB, c *net.TCPConn) int {
	tb.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, 512)
	n := len(buf)
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		// x/sys's GetsockoptString would stop at the first zero byte.
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_SAVED_SYN,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	})
	if errno != 0 {
		tb.Fatalf("TCP_SAVED_SYN: %v", errno)
	}
	mss, err := mssOption(buf[:n])
	if err != nil {
		tb.Fatalf("saved SYN: %v", err)
	}
	return mss
}

// mssOption finds the MSS option of a SYN given as IP and TCP headers
// (IPv4 with options, or IPv6 without extension headers).
func mssOption(pkt []byte) (int, error) {
	if len(pkt) < 1 {
		return 0, fmt.Errorf("empty")
	}
	ipLen := 40
	if pkt[0]>>4 == 4 {
		ipLen = int(pkt[0]&0xf) * 4
	}
	if len(pkt) < ipLen+20 {
		return 0, fmt.Errorf("%d bytes: no TCP header", len(pkt))
	}
	tcp := pkt[ipLen:]
	end := int(tcp[12]>>4) * 4
	if end > len(tcp) {
		return 0, fmt.Errorf("TCP header of %d bytes in %d", end, len(tcp))
	}
	for i := 20; i < end; {
		switch kind := tcp[i]; {
		case kind == 0:
			return 0, fmt.Errorf("no MSS option")
		case kind == 1:
			i++
		case i+1 >= end || tcp[i+1] < 2:
			return 0, fmt.Errorf("malformed option at %d", i)
		case kind == 2 && tcp[i+1] == 4 && i+4 <= end:
			return int(tcp[i+2])<<8 | int(tcp[i+3]), nil
		default:
			i += int(tcp[i+1])
		}
	}
	return 0, fmt.Errorf("no MSS option")
}

// TestWithLocalPort: on loopback, a dial under WithLocalPort leaves from
// the port picked for its server; a second connection from that port to
// the same server fails with an error IsPortInUse recognises, and one to
// another server shares the port (SO_REUSEADDR); a picker that has no
// port leaves the choice to the kernel.
func TestWithLocalPort(t *testing.T) {
	ln1, ln2 := listen(t), listen(t)
	free := listen(t) // a port nobody else uses: this listener's, once closed
	port := uint16(free.Addr().(*net.TCPAddr).Port)
	free.Close()
	var asked []netip.AddrPort
	pick := func(server netip.AddrPort) (uint16, bool) {
		asked = append(asked, server)
		return port, true
	}
	ctx := sockopt.WithLocalPort(context.Background(), pick)
	d := sockopt.Dialer()
	c1, err := d.DialContext(ctx, "tcp", ln1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if got := c1.LocalAddr().(*net.TCPAddr).Port; got != int(port) {
		t.Fatalf("left from port %d, want %d", got, port)
	}
	if len(asked) != 1 || asked[0].String() != ln1.Addr().String() {
		t.Errorf("picker asked for %v, want %v", asked, ln1.Addr())
	}
	_, err = d.DialContext(ctx, "tcp", ln1.Addr().String())
	if err == nil || !sockopt.IsPortInUse(err) {
		t.Fatalf("a second connection from the same port to the same server: %v", err)
	}
	c2, err := d.DialContext(ctx, "tcp", ln2.Addr().String())
	if err != nil {
		t.Fatalf("the same port toward another server: %v", err)
	}
	defer c2.Close()
	none := sockopt.WithLocalPort(context.Background(), func(netip.AddrPort) (uint16, bool) { return 0, false })
	c3, err := d.DialContext(none, "tcp", ln1.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got := c3.LocalAddr().(*net.TCPAddr).Port; got == int(port) || got == 0 {
		t.Errorf("without a port to give, left from %d", got)
	}
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// TestWithLocalPortOverIPv6: the port is bound on an IPv6 socket as on
// an IPv4 one, whether the dialer names the family ("tcp6", as Go's
// does) or not ("tcp").
func TestWithLocalPortOverIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	for _, network := range []string{"tcp6", "tcp"} {
		t.Run(network, func(t *testing.T) {
			free, err := net.Listen("tcp6", "[::1]:0")
			if err != nil {
				t.Fatal(err)
			}
			port := uint16(free.Addr().(*net.TCPAddr).Port)
			free.Close()
			ctx := sockopt.WithLocalPort(context.Background(), func(netip.AddrPort) (uint16, bool) { return port, true })
			d := net.Dialer{ControlContext: func(ctx context.Context, _, address string, c syscall.RawConn) error {
				return sockopt.Control(ctx, network, address, c)
			}}
			c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.LocalAddr().(*net.TCPAddr).Port; got != int(port) {
				t.Fatalf("left from port %d, want %d", got, port)
			}
		})
	}
}

// Tests that tcp_keepalive reaches the client and upstream sockets of a pair, and that a vanished client ends its pair.

package forwarder_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	copyengine "github.com/splicer/splicer/engine/copy"
	pipeengine "github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// keepalive is one socket's keepalive settings as the kernel holds them.
type keepalive struct {
	on                    bool
	idle, interval, count int
}

func TestTCPKeepaliveReachesBothSocketsOfAPair(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  config.TCPKeepalive
		want keepalive
	}{
		{"configured", config.TCPKeepalive{Idle: config.Duration(7 * time.Second), Interval: config.Duration(3 * time.Second), Count: 4}, keepalive{true, 7, 3, 4}},
		{"default", config.DefaultTCPKeepalive, keepalive{true, 15, 15, 9}},
		{"off", config.TCPKeepalive{}, keepalive{on: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c, up := keepalivePair(t, copyengine.Name, tc.set)
			// The forwarder sets the upstream's options once its connect
			// returns, which may be after the server accepted, and before
			// the pair shows its upstream.
			testenv.EventuallyShowing(t, "the pair's upstream in the flows", func() bool {
				fl := f.Flows().Snapshot()
				return len(fl) == 1 && fl[0].Upstream != ""
			}, func() string { return fmt.Sprintf("%+v", f.Flows().Snapshot()) })
			// The forwarder's socket is the far end of the test's.
			if got := keepaliveOf(t, c.RemoteAddr(), c.LocalAddr()); got.on != tc.want.on || (got.on && got != tc.want) {
				t.Errorf("the forwarder's client socket: keepalive %+v, want %+v", got, tc.want)
			}
			// The upstream's is set once the pair has lived a while
			// (keepAliveDelay), before the first probe is due.
			var got keepalive
			testenv.EventuallyShowing(t, "the upstream socket's keepalive", func() bool {
				got = keepaliveOf(t, up.RemoteAddr(), up.LocalAddr())
				return got.on == tc.want.on && (!got.on || got == tc.want)
			}, func() string { return fmt.Sprintf("keepalive %+v, want %+v", got, tc.want) })
		})
	}
}

// TestShortPairSetsNoUpstreamKeepalive: the upstream socket of a pair
// that has not yet lived keepAliveDelay has no keepalive set (a churn of
// short connections pays none of its four setsockopts), and has it once
// the pair lived that long, or at once when the pair is spliced by an
// engine other than copy.
func TestShortPairSetsNoUpstreamKeepalive(t *testing.T) {
	for _, engineName := range []string{copyengine.Name, pipeengine.Name} {
		t.Run(engineName, func(t *testing.T) {
			f, _, up := keepalivePair(t, engineName, config.TCPKeepalive{Idle: config.Duration(time.Hour), Interval: config.Duration(3 * time.Second), Count: 4})
			testenv.EventuallyShowing(t, "the pair spliced", func() bool {
				fl := f.Flows().Snapshot()
				return len(fl) == 1 && fl[0].State == engine.StateSpliced.String()
			}, func() string { return fmt.Sprintf("%+v", f.Flows().Snapshot()) })
			got := keepaliveOf(t, up.RemoteAddr(), up.LocalAddr())
			want := keepalive{true, 3600, 3, 4}
			if engineName == copyengine.Name {
				want = keepalive{on: false, idle: got.idle, interval: got.interval, count: got.count}
			}
			if got != want {
				t.Errorf("the forwarder's upstream socket on %s, at once: keepalive %+v, want %+v", engineName, got, want)
			}
		})
	}
}

// keepalivePair starts a forwarder with one tcp listener on engine
// engineName and keepalive ka in front of a loopback server, and opens a
// pair through it: the test's client connection and the server's end of
// the upstream one.
func keepalivePair(tb testing.TB, engineName string, ka config.TCPKeepalive) (f *forwarder.Forwarder, c, up net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ups := acceptConns(tb, ln)
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = "t", "127.0.0.1:0", config.Servers(ln.Addr().String()), engineName
	l.TCPKeepalive = ka
	f = fwdtest.Start(tb, l)
	c, err = net.Dial("tcp", f.Addr("t").String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return f, c, accept(tb, ups)
}

// keepaliveOf reads the keepalive settings of this process's socket from
// local to peer: the forwarder runs in the test's process, so its sockets
// are among the test's descriptors.
func keepaliveOf(tb testing.TB, local, peer net.Addr) keepalive {
	tb.Helper()
	fd := socketAt(tb, local, peer)
	var k keepalive
	on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	if err != nil {
		tb.Fatal(err)
	}
	k.on = on != 0
	for _, o := range []struct {
		opt int
		v   *int
	}{{unix.TCP_KEEPIDLE, &k.idle}, {unix.TCP_KEEPINTVL, &k.interval}, {unix.TCP_KEEPCNT, &k.count}} {
		if *o.v, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, o.opt); err != nil {
			tb.Fatal(err)
		}
	}
	return k
}

// socketAt finds the descriptor of this process's socket from local to
// peer (a listener on local has no peer).
func socketAt(tb testing.TB, local, peer net.Addr) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(link, "socket:") {
			continue
		}
		if inet4(unix.Getsockname(fd)) == local.String() && inet4(unix.Getpeername(fd)) == peer.String() {
			return fd
		}
	}
	tb.Fatalf("no socket of this process goes from %s to %s", local, peer)
	return -1
}

// inet4 writes an IPv4 socket address as net.Addr does, "" for any other.
func inet4(sa unix.Sockaddr, err error) string {
	in4, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok {
		return ""
	}
	return (&net.TCPAddr{IP: in4.Addr[:], Port: in4.Port}).String()
}

// vanishingKeepalive probes after 1 s, then every second, and gives up
// after 2 probes: a peer that vanished is found after about 3 s.
var vanishingKeepalive = config.TCPKeepalive{Idle: config.Duration(time.Second), Interval: config.Duration(time.Second), Count: 2}

// TestLabVanishedClientEndsItsPair: a client whose packets stop arriving
// (every one dropped, as after a power loss or a NAT that forgot the
// flow) sends no FIN or reset. With vanishingKeepalive the forwarder
// finds it gone after about 3 s, ends the pair (close reason
// peer_timeout) and resets the server's connection, for every listener
// kind of the random tests and every engine but ip: while ip splices, the
// forwarder's sockets are frozen and the ends' own probes pass through.
func TestLabVanishedClientEndsItsPair(t *testing.T) {
	for _, kind := range randomKinds {
		for _, name := range []string{copyengine.Name, "pipe", "sockmap"} {
			t.Run(kind.prefix+name, func(t *testing.T) {
				t.Parallel()
				l := lab.NewT(t, lab.DefaultConfig())
				up := serverConns(t, l, httplab.ServerAddr(l, 9701))
				lc := kind.listener(l)
				lc.Engine, lc.TCPKeepalive = name, vanishingKeepalive
				lf := startLabForwarder(t, l, lc)
				lf.requireEngine(t, name)
				_, s := kind.open(t, l, lf, up)
				lf.waitFlow(t, "random", "spliced by "+name, func(f forwarder.Flow) bool { return f.Engine == name && f.State == "spliced" })
				took := vanish(t, l)
				s.SetReadDeadline(time.Now().Add(waitFor))
				n, err := io.Copy(io.Discard, s)
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("server: %d bytes then %v after %v, want a reset once keepalive gives up on the client", n, err, took())
				}
				lf.waitClosed(t, "random", "peer_timeout", 1)
				checkFoundByKeepalive(t, took())
			})
		}
	}
}

// TestLabVanishedClientBetweenRequests: a client of an HTTP kind that
// vanishes while the listener waits for its next request is found by
// keepalive as well, well before the hour of idle_timeout, and counted
// peer_timeout rather than a client that closed (eof).
func TestLabVanishedClientBetweenRequests(t *testing.T) {
	for _, kind := range []struct {
		proxy, target string
		listener      func(lc *config.Listener, server string)
	}{
		{"http-reverse", "/obj/100", func(lc *config.Listener, server string) {
			lc.Routes = []config.Route{{Pool: "s"}}
			lc.Pools = []config.Pool{{Name: "s", Servers: config.Servers(server)}}
		}},
		{"http-forward", "http://%s/obj/100", func(lc *config.Listener, server string) {
			host, _, _ := net.SplitHostPort(server)
			lc.Destinations = &config.Destinations{Allow: []string{host}}
		}},
		{"filter", "/obj/100", func(lc *config.Listener, server string) { lc.Upstream = config.Servers(server) }},
	} {
		t.Run(kind.proxy, func(t *testing.T) {
			t.Parallel()
			l := lab.NewT(t, lab.DefaultConfig())
			server := httplab.ServerAddr(l, 9702)
			httplab.ServeProto(t, l, origin.HTTP, server)
			lc := randomListener(l, kind.proxy)
			kind.listener(&lc, server)
			lc.TCPKeepalive = vanishingKeepalive
			lf := startLabForwarder(t, l, lc)
			c := httplab.Dial(t, l, lf.Addr("random").String())
			c.SetDeadline(time.Now().Add(waitFor))
			target := kind.target
			if strings.Contains(target, "%s") {
				target = fmt.Sprintf(target, server)
			}
			if _, err := c.Write([]byte("GET " + target + " HTTP/1.1\r\nHost: " + server + "\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if body, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != 200 || len(body) != 100 {
				t.Fatalf("answer %d, %d bytes, %v", resp.StatusCode, len(body), err)
			}
			took := vanish(t, l)
			lf.waitClosed(t, "random", "peer_timeout", 1)
			checkFoundByKeepalive(t, took())
		})
	}
}

// vanish drops every packet between the client and the forwarder from now
// on, and returns how long ago that was.
func vanish(tb testing.TB, l *lab.Lab) (since func() time.Duration) {
	tb.Helper()
	if err := l.SetLoss(l.ClientLink(), lab.BothWays, 100); err != nil {
		tb.Fatal(err)
	}
	at := time.Now()
	return func() time.Duration { return time.Since(at) }
}

// checkFoundByKeepalive fails when a pair ended sooner after its client
// vanished than vanishingKeepalive allows: probes at 1 s and 2 s, given
// up at 3 s; not before the first probe could go unanswered.
func checkFoundByKeepalive(tb testing.TB, took time.Duration) {
	tb.Helper()
	if took < 2*time.Second {
		tb.Errorf("pair ended %v after the client vanished: before keepalive could find it gone", took)
	}
	tb.Logf("pair ended %v after the client vanished", took.Round(10*time.Millisecond))
}

// Lab test of engine ip across links of different MTUs: the upstream announces the client's MSS, so ip splices instead of falling back.

package forwarder_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/origin/origintest"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestLabIPSplicesAcrossMTUs: the client link has MTU 1400 (the client
// announces MSS 1360 over IPv4, 1340 over IPv6), the server link keeps 1500
// (1460, 1440). With engine ip the forwarder's upstream SYN announces the
// client's MSS, so the server never sends a segment larger than the client
// accepts: ip splices the pair (no "engine declined pair" for the MSS, no
// fallback), 32 MiB each way arrive intact (the upload's sha256 as the
// server computed it, the download byte for byte), /flows shows the pair
// spliced by ip throughout, and the datapath drops nothing as
// mtu_exceeded. Without the upstream announcing the client's MSS, ip
// declines such a pair: "the server may send 1448-byte segments, the
// client accepts 1360". A client announcing less than the forwarder
// offered it still makes ip decline (see testClientAnnouncesLess).
func TestLabIPSplicesAcrossMTUs(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	if err := l.SetMTU(l.ClientLink(), 1400); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		fwd, srv  netip.AddrPort
		clientMSS int
	}{
		{"ipv4", netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7801), netip.AddrPortFrom(l.Cfg.Server.Addr(), 9801), 1360},
		{"ipv6", netip.AddrPortFrom(l.Cfg.FwdClient6.Addr(), 7802), netip.AddrPortFrom(l.Cfg.Server6.Addr(), 9802), 1340},
	}
	var listeners []config.Listener
	accepted := map[string]*acceptedConns{}
	for _, c := range cases {
		accepted[c.name] = serveStreamRecording(t, l, c.srv.String())
		lc := tcpListener(c.name, c.fwd.String(), c.srv.String())
		lc.Engine = ip.Name
		listeners = append(listeners, lc)
	}
	clamped := tcpListener("clamped", httplab.FwdAddr(l, 7803), httplab.ServerAddr(l, 9803))
	clamped.Engine = ip.Name
	httplab.ServeProto(t, l, origin.Stream, httplab.ServerAddr(l, 9803))
	lf := startLabForwarder(t, l, append(listeners, clamped)...)
	lf.requireEngine(t, ip.Name)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const size = 32 << 20
			client := httplab.Dial(t, l, lf.Addr(c.name).String())
			lf.waitFlow(t, c.name, "spliced by ip", func(f forwarder.Flow) bool {
				return f.State == "spliced" && f.Engine == ip.Name
			})
			if got := announcedMSS(t, accepted[c.name].first(t)); got != c.clientMSS {
				t.Errorf("the upstream connection announced MSS %d to the server, want the client's %d", got, c.clientMSS)
			}
			flows := streamSampled(t, lf, c.name, client, size)
			for _, f := range flows {
				if f.Engine != ip.Name || (f.State != "spliced" && f.State != "closing") {
					t.Errorf("/flows during the transfer shows engine %s, state %s (%s); want ip, spliced", f.Engine, f.State, f.Note)
				}
			}
			lf.waitClosed(t, c.name, "eof", 1)
		})
	}
	testClientAnnouncesLess(t, lf, clamped.Name)
	for _, c := range cases {
		if line := lf.Logs.Line("engine declined pair", "listener="+c.name); line != "" {
			t.Errorf("an engine declined a pair: %s", line)
		}
	}
	if line := lf.Logs.Line("the server may send"); line != "" {
		t.Errorf("the server may still send segments the client does not accept: %s", line)
	}
	if n := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "eof"); n != float64(len(cases)) {
		t.Errorf("ip splices that ended at EOF: %v, want %d", n, len(cases))
	}
	if n := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "fallback"); n != 1 {
		t.Errorf("ip fell back %v times, want once (the client announcing less)", n)
	}
	for _, drop := range []string{"mtu_exceeded", "malformed", "rewrite_failed"} {
		if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", drop); n != 0 {
			t.Errorf("datapath dropped %v segments as %s", n, drop)
		}
	}
	if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", "forwarded"); n == 0 {
		t.Error("the datapath forwarded no segment")
	}
}

// testClientAnnouncesLess: a client announcing MSS 1000, less than the
// 1360 the forwarder offered it (as behind an MSS-clamping router), gets
// an upstream announcing 1000 too; the forwarder's upstream socket then
// records the server's MSS capped at 1000 and cannot tell that the server
// accepts the client's 1360-byte segments, so ip declines the pair with
// that reason and a shallower engine carries the bytes intact.
func testClientAnnouncesLess(t *testing.T, lf *labForwarder, listener string) {
	t.Run("client-announces-less", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := lf.Lab.Client.Dial(sockopt.WithMSS(ctx, 1000), "tcp", lf.Addr(listener).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		f := lf.waitFlow(t, listener, "spliced by a shallower engine", func(f forwarder.Flow) bool {
			return f.State == "spliced" && f.Engine != ip.Name
		})
		if want := "the server accepts 1000"; !strings.Contains(f.Note, "the client may send") || !strings.Contains(f.Note, want) {
			t.Errorf("/flows note %q, want the fallback's reason with %q", f.Note, want)
		}
		rep, err := origin.StreamCheck(ctx, c, 1<<20, 1<<20)
		if err != nil || !rep.OK() {
			t.Fatalf("1 MiB each way after the fallback: %+v, %v", rep, err)
		}
	})
}

// acceptedConns records the connections an origin listener accepted.
type acceptedConns struct {
	net.Listener
	mu    sync.Mutex
	conns []*net.TCPConn
	ready chan struct{}
}

func (a *acceptedConns) Accept() (net.Conn, error) {
	c, err := a.Listener.Accept()
	if err != nil {
		return c, err
	}
	a.mu.Lock()
	a.conns = append(a.conns, c.(*net.TCPConn))
	if len(a.conns) == 1 {
		close(a.ready)
	}
	a.mu.Unlock()
	return c, nil
}

// first is the first connection accepted, waiting for it.
func (a *acceptedConns) first(tb testing.TB) *net.TCPConn {
	tb.Helper()
	select {
	case <-a.ready:
	case <-time.After(waitFor):
		tb.Fatal("the upstream connection never reached the server")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[0]
}

// serveStreamRecording serves the origin's stream protocol on addr in l's
// server namespace, recording the accepted connections.
func serveStreamRecording(tb testing.TB, l *lab.Lab, addr string) *acceptedConns {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("origin stream: %v", err)
	}
	rec := &acceptedConns{Listener: ln, ready: make(chan struct{})}
	origintest.Serve(tb, rec, origin.Stream)
	return rec
}

// announcedMSS is the MSS the peer of c announced in its SYN.
func announcedMSS(tb testing.TB, c *net.TCPConn) int {
	tb.Helper()
	mss, err := sockopt.AnnouncedMSS(c)
	if err != nil {
		tb.Fatal(err)
	}
	return mss
}

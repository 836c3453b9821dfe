// Lab tests of connections the forwarder turns away: upstream refused, unreachable or timing out, and max_connections.

package forwarder_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestLabUpstreamFailures: when the upstream cannot be connected, the client
// is closed promptly and the pair is logged and counted with the reason.
func TestLabUpstreamFailures(t *testing.T) {
	t.Parallel()
	l := lab.NewT(t, lab.DefaultConfig())
	cases := []struct {
		name     string
		port     uint16
		upstream string
		timeout  time.Duration // connect_timeout
		reason   string
	}{
		// The server's kernel answers a SYN to a closed port with a reset.
		{"refused", 7101, httplab.ServerAddr(l, 1), 10 * time.Second, "upstream_refused"},
		// The forwarder has no route to 10.99.3.0/24.
		{"unreachable", 7102, "10.99.3.3:80", 10 * time.Second, "upstream_unreachable"},
		// Nobody answers ARP for .99 on the server link, so the connect
		// waits (about 3 s, then EHOSTUNREACH) and the short connect
		// timeout ends it first.
		{"timeout", 7103, "10.99.2.99:80", 300 * time.Millisecond, "upstream_timeout"},
	}
	var listeners []config.Listener
	for _, c := range cases {
		lc := tcpListener(c.name, httplab.FwdAddr(l, c.port), c.upstream)
		lc.ConnectTimeout = config.Duration(c.timeout)
		listeners = append(listeners, lc)
	}
	lf := startLabForwarder(t, l, listeners...)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client := httplab.Dial(t, l, lf.Addr(c.name).String())
			// Prompt: well under the 10 s connect timeout for errors the
			// kernel reports at once, just past it for a timeout.
			limit := 2 * time.Second
			if c.reason == "upstream_timeout" {
				limit += c.timeout
			}
			waitClosedByPeer(t, client, limit)
			lf.waitClosed(t, c.name, c.reason, 1)
			if lf.Logs.Line("pair closed", "listener="+c.name, "reason="+c.reason) == "" {
				t.Errorf("no log line says pair closed with reason=%s; log:\n%s", c.reason, lf.Logs)
			}
		})
	}
}

// TestLabMaxConnections: past max_connections a new connection is accepted
// and closed at once, counted as max_connections; once a pair ends there is
// room again.
func TestLabMaxConnections(t *testing.T) {
	t.Parallel()
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9201))
	lc := tcpListener("capped", httplab.FwdAddr(l, 7201), httplab.ServerAddr(l, 9201))
	lc.MaxConnections = 2
	lf := startLabForwarder(t, l, lc)
	addr := lf.Addr("capped").String()

	first, second := httplab.Dial(t, l, addr), httplab.Dial(t, l, addr)
	echo(t, first, "one")
	echo(t, second, "two")

	over := httplab.Dial(t, l, addr)
	waitClosedByPeer(t, over, 2*time.Second)
	lf.waitClosed(t, "capped", "max_connections", 1)
	if lf.Logs.Line("reason=max_connections") == "" {
		t.Errorf("the refused connection was not logged; log:\n%s", lf.Logs)
	}

	first.Close()
	testenv.EventuallyShowing(t, "a pair slot to free up", func() bool {
		return lf.Metric("splicer_connections_active", "listener", "capped") == 1
	}, func() string { return "still 2 active" })
	echo(t, httplab.Dial(t, l, addr), "three")
	echo(t, second, "two again")
	if n := lf.closed("capped", "max_connections"); n != 1 {
		t.Errorf("%v connections closed for max_connections, want only the one over the limit", n)
	}
}

// echo sends msg through an echo upstream and expects it back.
func echo(tb testing.TB, c *net.TCPConn, msg string) {
	tb.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		tb.Fatalf("write: %v", err)
	}
	if got := readFull(tb, c, len(msg)); !bytes.Equal(got, []byte(msg)) {
		tb.Fatalf("echo of %q came back as %q", msg, got)
	}
}

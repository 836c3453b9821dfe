// Helpers for the lab tests: an in-process forwarder in the lab's forwarder namespace, servers in the server namespace, /flows, metrics and captured logs.

package forwarder_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// waitFor bounds every wait for something the forwarder does asynchronously;
// it is generous because it only matters when a test is about to fail.
const waitFor = 10 * time.Second

// labForwarder is an in-process forwarder whose listeners and upstream
// connections live in a lab's forwarder namespace.
type labForwarder struct {
	*fwdtest.LabForwarder
	admin *httptest.Server
}

// tcpListener is a listener with every default but name, address and upstream.
func tcpListener(name, listen, upstream string) config.Listener {
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Upstream = name, listen, config.Servers(upstream)
	return lc
}

// startLabForwarder runs listeners in l's forwarder namespace, with the
// engines built there, logs captured and the admin routes served on an
// httptest server. Cleanup shuts it down.
func startLabForwarder(tb testing.TB, l *lab.Lab, listeners ...config.Listener) *labForwarder {
	tb.Helper()
	return startLabForwarderWith(tb, l, config.Default().Engines, listeners...)
}

// startLabForwarderWith is startLabForwarder with engines configured as given.
func startLabForwarderWith(tb testing.TB, l *lab.Lab, engines config.Engines, listeners ...config.Listener) *labForwarder {
	tb.Helper()
	lf := &labForwarder{LabForwarder: fwdtest.StartInLabWith(tb, l, engines, listeners...)}
	lf.admin = httptest.NewServer(admin.Handler(lf.Forwarder))
	tb.Cleanup(lf.admin.Close)
	return lf
}

// requireEngine fails (under CI) or skips the test when engine name cannot
// run on this host, with the reason the engine gave.
func (lf *labForwarder) requireEngine(tb testing.TB, name string) {
	tb.Helper()
	if reason := lf.Engines.Reason(name); reason != "" {
		testenv.SkipOrFail(tb, fmt.Sprintf("engine %s unavailable on this host: %s", name, reason))
	}
}

// flows fetches GET /flows.
func (lf *labForwarder) flows() ([]forwarder.Flow, error) {
	resp, err := http.Get(lf.admin.URL + "/flows")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var fl []forwarder.Flow
	if err := json.NewDecoder(resp.Body).Decode(&fl); err != nil {
		return nil, fmt.Errorf("GET /flows: decode: %w", err)
	}
	return fl, nil
}

// flowOf returns the only open flow of listener, if there is exactly one.
func (lf *labForwarder) flowOf(listener string) (forwarder.Flow, bool, error) {
	fl, err := lf.flows()
	if err != nil {
		return forwarder.Flow{}, false, err
	}
	var found []forwarder.Flow
	for _, f := range fl {
		if f.Listener == listener {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		return forwarder.Flow{}, false, nil
	}
	return found[0], true, nil
}

// waitFlow waits until listener has exactly one open flow and ok accepts it.
func (lf *labForwarder) waitFlow(tb testing.TB, listener, what string, ok func(forwarder.Flow) bool) forwarder.Flow {
	tb.Helper()
	var last forwarder.Flow
	var seen bool
	var err error
	testenv.EventuallyShowing(tb, "flow of "+listener+" "+what, func() bool {
		last, seen, err = lf.flowOf(listener)
		return err == nil && seen && ok(last)
	}, func() string { return fmt.Sprintf("last flow %+v (found: %v, err: %v)", last, seen, err) })
	return last
}

// closed is splicer_connections_closed_total for listener and reason.
func (lf *labForwarder) closed(listener, reason string) float64 {
	return lf.Metric("splicer_connections_closed_total", "listener", listener, "reason", reason)
}

// closedReasons is splicer_connections_closed_total of listener by reason.
func (lf *labForwarder) closedReasons(listener string) map[string]float64 {
	out := map[string]float64{}
	families, err := lf.Metrics().Registry.Gather()
	if err != nil {
		panic(err) // the forwarder's own registry: a programming error
	}
	for _, mf := range families {
		if mf.GetName() != "splicer_connections_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l, reason string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "listener":
					l = lp.GetValue()
				case "reason":
					reason = lp.GetValue()
				}
			}
			if l == listener && m.GetCounter().GetValue() > 0 {
				out[reason] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// waitClosed waits until n pairs of listener were counted closed, and
// fails unless all of them were closed for reason.
func (lf *labForwarder) waitClosed(tb testing.TB, listener, reason string, n float64) {
	tb.Helper()
	var reasons map[string]float64
	testenv.EventuallyShowing(tb, fmt.Sprintf("%v pairs of %s counted closed", n, listener), func() bool {
		reasons = lf.closedReasons(listener)
		var total float64
		for _, v := range reasons {
			total += v
		}
		return total >= n
	}, func() string { return fmt.Sprintf("counted %v", reasons) })
	if want := map[string]float64{reason: n}; !maps.Equal(reasons, want) {
		tb.Fatalf("splicer_connections_closed_total{listener=%q} by reason: %v, want %v", listener, reasons, want)
	}
}

// serverConns listens on addr in l's server namespace and hands over every
// accepted connection, for tests that drive the server side by hand.
func serverConns(tb testing.TB, l *lab.Lab, addr string) <-chan *net.TCPConn {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("server listen: %v", err)
	}
	return acceptConns(tb, ln)
}

// acceptConns accepts on ln until the test ends, sending each connection
// on the channel; the cleanup closes ln and every connection.
func acceptConns(tb testing.TB, ln net.Listener) <-chan *net.TCPConn {
	tb.Helper()
	ch := make(chan *net.TCPConn, 16)
	testenv.HoldEach(tb, ln, func(c net.Conn) { ch <- c.(*net.TCPConn) })
	return ch
}

// accept takes the next connection from ch.
func accept(tb testing.TB, ch <-chan *net.TCPConn) *net.TCPConn {
	tb.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(waitFor):
		tb.Fatal("the upstream connection never reached the server")
		return nil
	}
}

// readAll reads c to EOF within waitFor.
func readAll(tb testing.TB, c *net.TCPConn) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(waitFor))
	b, err := io.ReadAll(c)
	if err != nil {
		tb.Fatalf("read to EOF: got %d bytes, then %v", len(b), err)
	}
	return b
}

// readFull reads exactly n bytes from c within waitFor.
func readFull(tb testing.TB, c *net.TCPConn, n int) []byte {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(waitFor))
	b := make([]byte, n)
	if got, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("read %d bytes: got %d, then %v", n, got, err)
	}
	return b
}

// writeAsync writes b to c (then half-closes it if closeWrite) in the
// background, so that a peer reading slowly cannot deadlock the test, and
// reports a failed write at the end of the test.
func writeAsync(tb testing.TB, c *net.TCPConn, b []byte, closeWrite bool) {
	tb.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		if err == nil && closeWrite {
			err = c.CloseWrite()
		}
		done <- err
	}()
	tb.Cleanup(func() {
		if tb.Failed() {
			c.Close() // the reader may be gone: unblock the write
		}
		select {
		case err := <-done:
			if err != nil && !tb.Failed() {
				tb.Errorf("write %d bytes: %v", len(b), err)
			}
		case <-time.After(waitFor):
			c.Close()
			<-done
			tb.Errorf("write of %d bytes never finished", len(b))
		}
	})
}

// waitClosedByPeer waits until the peer ends c (FIN or RST) and fails if it
// has not within limit.
func waitClosedByPeer(tb testing.TB, c net.Conn, limit time.Duration) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, syscall.ECONNRESET) || err == nil {
		return
	}
	tb.Fatalf("connection not closed by the forwarder within %v: %v", limit, err)
}

// Lab tests of every engine through the forwarder: 64 MiB each way at once, half-close and reset each way, with /flows and metrics checked.

package forwarder_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// engineLab is one engine's forwarder in its own lab, with a listener per
// test case so that each case's metrics stand alone.
type engineLab struct {
	*labForwarder
	engine string
}

// Listener names, forwarder ports and server ports of the engine cases.
var engineCases = []struct {
	name         string
	fwd, srv     uint16
	run          func(t *testing.T, e *engineLab, listener string, upstream <-chan *net.TCPConn)
	streamOrigin bool // the upstream is an origin stream server, not driven by hand
}{
	{name: "stream", fwd: 7001, srv: 9001, run: testStream64MiB, streamOrigin: true},
	{name: "halfclose-client", fwd: 7002, srv: 9002, run: testHalfCloseFromClient},
	{name: "halfclose-server", fwd: 7003, srv: 9003, run: testHalfCloseFromServer},
	{name: "reset-client", fwd: 7004, srv: 9004, run: testResetFromClient},
	{name: "reset-server", fwd: 7005, srv: 9005, run: testResetFromServer},
}

// TestLabEngines runs every engine of the ladder through the forwarder. An
// engine this host cannot run fails under CI and is skipped otherwise.
func TestLabEngines(t *testing.T) {
	for _, name := range all.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := lab.NewT(t, lab.DefaultConfig())
			upstreams := map[string]<-chan *net.TCPConn{}
			var listeners []config.Listener
			for _, c := range engineCases {
				if c.streamOrigin {
					httplab.ServeProto(t, l, origin.Stream, httplab.ServerAddr(l, c.srv))
				} else {
					upstreams[c.name] = serverConns(t, l, httplab.ServerAddr(l, c.srv))
				}
				lc := tcpListener(c.name, httplab.FwdAddr(l, c.fwd), httplab.ServerAddr(l, c.srv))
				lc.Engine = name
				listeners = append(listeners, lc)
			}
			lf := startLabForwarder(t, l, listeners...)
			lf.requireEngine(t, name)
			e := &engineLab{labForwarder: lf, engine: name}
			for _, c := range engineCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, e, c.name, upstreams[c.name]) })
			}
		})
	}
}

// connect opens a pair through listener and waits until /flows shows it
// spliced by the engine under test.
func (e *engineLab) connect(t *testing.T, listener string, upstream <-chan *net.TCPConn) (client, server *net.TCPConn) {
	t.Helper()
	client = httplab.Dial(t, e.Lab, e.Addr(listener).String())
	server = accept(t, upstream)
	e.waitSpliced(t, listener)
	return client, server
}

// waitSpliced waits until listener's pair is spliced by the engine under test.
func (e *engineLab) waitSpliced(t *testing.T, listener string) forwarder.Flow {
	t.Helper()
	return e.waitFlow(t, listener, "spliced by "+e.engine, func(f forwarder.Flow) bool {
		return f.State == "spliced" && f.Engine == e.engine
	})
}

// testStream64MiB sends 64 MiB each way at once through the engine and
// checks both directions (sha256 of the upload, every byte of the download),
// that /flows shows the engine under test while bytes move, and that the
// byte counters match what was sent once the pair is closed.
func testStream64MiB(t *testing.T, e *engineLab, listener string, _ <-chan *net.TCPConn) {
	const size = 64 << 20
	client := httplab.Dial(t, e.Lab, e.Addr(listener).String())
	e.waitSpliced(t, listener)

	flows := streamSampled(t, e.labForwarder, listener, client, size)
	for _, f := range flows {
		// Draining is the engine's too: sockmap delivers what it finds
		// queued when the splice starts and when the stream ends.
		if f.Engine != e.engine || (f.State != "spliced" && f.State != "closing" && f.State != "draining") {
			t.Errorf("/flows during the transfer shows engine %s, state %s; want %s, spliced", f.Engine, f.State, e.engine)
		}
	}
	t.Logf("%d /flows samples during the transfer", len(flows))

	e.waitClosed(t, listener, "eof", 1)
	// The stream protocol adds a 16-byte header up and a 32-byte digest down.
	for dir, want := range map[string]float64{"up": size + 16, "down": size + 32} {
		if got := e.Metric("splicer_bytes_total", "listener", listener, "direction", dir); got != want {
			t.Errorf("splicer_bytes_total{direction=%q} = %v, want %v", dir, got, want)
		}
	}
}

// streamSampled sends size bytes each way at once through client, on
// listener's pair, and checks both directions (origin.StreamCheck), while
// polling /flows for the pair in the background; it fails the test
// unless every byte arrived, and returns what /flows showed meanwhile.
func streamSampled(t *testing.T, lf *labForwarder, listener string, client net.Conn, size int64) []forwarder.Flow {
	t.Helper()
	var seen []forwarder.Flow
	stop := testenv.Every(t, 2*time.Millisecond, func() {
		// An error here would show as a missing sample; the transfer
		// itself is what the test checks.
		if f, ok, err := lf.flowOf(listener); err == nil && ok {
			seen = append(seen, f)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := origin.StreamCheck(ctx, client, size, size)
	stop()
	if err != nil || !rep.OK() {
		t.Fatalf("%d MiB each way through %s: %+v, %v", size>>20, listener, rep, err)
	}
	return seen
}

// testHalfCloseFromClient: the client sends a request and half-closes; the
// server sees every byte then EOF, and its answer still reaches the client.
func testHalfCloseFromClient(t *testing.T, e *engineLab, listener string, upstream <-chan *net.TCPConn) {
	client, server := e.connect(t, listener, upstream)
	testHalfClose(t, e, listener, client, server, "up")
}

// testHalfCloseFromServer: the server sends a greeting and half-closes; the
// client sees every byte then EOF, and its answer still reaches the server.
func testHalfCloseFromServer(t *testing.T, e *engineLab, listener string, upstream <-chan *net.TCPConn) {
	client, server := e.connect(t, listener, upstream)
	testHalfClose(t, e, listener, server, client, "down")
}

// testHalfClose has first send and half-close, then second answer on the
// half-open pair. dir is the direction first's bytes travel. Between the two,
// /flows must show the pair spliced with exactly the bytes sent so far.
func testHalfClose(t *testing.T, e *engineLab, listener string, first, second *net.TCPConn, dir string) {
	msg, answer := enginetest.Random(256<<10, 1), enginetest.Random(1<<20, 2)
	writeAsync(t, first, msg, true)
	if got := readAll(t, second); sha256.Sum256(got) != sha256.Sum256(msg) {
		t.Fatalf("%s: %d bytes arrived before EOF, want the %d sent, unchanged", dir, len(got), len(msg))
	}
	counts := func(sent, answered int) func(forwarder.Flow) bool {
		up, down := int64(sent), int64(answered)
		if dir == "down" {
			up, down = down, up
		}
		return func(f forwarder.Flow) bool {
			return f.State == "spliced" && f.Engine == e.engine && f.BytesUp == up && f.BytesDown == down
		}
	}
	e.waitFlow(t, listener, "half-closed with the message counted", counts(len(msg), 0))

	writeAsync(t, second, answer, false)
	if got := readFull(t, first, len(answer)); sha256.Sum256(got) != sha256.Sum256(answer) {
		t.Fatal("the answer on the half-closed pair arrived changed")
	}
	e.waitFlow(t, listener, "with both ways counted", counts(len(msg), len(answer)))

	second.CloseWrite()
	if rest := readAll(t, first); len(rest) != 0 {
		t.Fatalf("%d bytes after the answer, want EOF", len(rest))
	}
	e.waitClosed(t, listener, "eof", 1)
}

// testResetFromClient: a reset from the client reaches the server as a reset.
func testResetFromClient(t *testing.T, e *engineLab, listener string, upstream <-chan *net.TCPConn) {
	client, server := e.connect(t, listener, upstream)
	testReset(t, e, listener, client, server)
}

// testResetFromServer: a reset from the server reaches the client as a reset.
func testResetFromServer(t *testing.T, e *engineLab, listener string, upstream <-chan *net.TCPConn) {
	client, server := e.connect(t, listener, upstream)
	testReset(t, e, listener, server, client)
}

// testReset exchanges a byte each way, resets resetter and expects the other
// end to see ECONNRESET and the pair counted as closed by reset.
func testReset(t *testing.T, e *engineLab, listener string, resetter, other *net.TCPConn) {
	for _, c := range [][2]*net.TCPConn{{resetter, other}, {other, resetter}} {
		if _, err := c[0].Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		readFull(t, c[1], 1)
	}
	resetter.SetLinger(0)
	resetter.Close()

	other.SetReadDeadline(time.Now().Add(waitFor))
	_, err := other.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the reset the other end read %v, want ECONNRESET", err)
	}
	e.waitClosed(t, listener, "reset", 1)
}

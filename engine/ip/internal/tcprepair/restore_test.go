// Rebuilding a frozen socket in place costs a bounded number of system calls and leaves a working connection.

package tcprepair

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

// TestRebuildSockCalls: an accepted and a dialed socket, frozen and
// rebuilt with one byte back in flight, as an unsplice rebuilds them,
// carry bytes both ways afterwards, and each rebuild made at most
// maxRebuildCalls system calls: the send queue stays selected from its
// sequence number for the in-flight byte, and a socket bound by the
// rebuild itself is not asked its address again.
func TestRebuildSockCalls(t *testing.T) {
	testenv.RequireRoot(t)
	// disconnect, SO_ERROR, two queues' selection and seq, bind,
	// TCP_MAXSEG, connect, TCP_REPAIR_OPTIONS, TCP_TIMESTAMP, the
	// in-flight byte's write and TCP_REPAIR_WINDOW.
	const maxRebuildCalls = 13
	c := enginetest.NewPair(t)
	for _, s := range []struct {
		name      string
		fwd, peer *net.TCPConn
	}{{"accepted", c.Pair.Client, c.Client}, {"dialed", c.Pair.Upstream(), c.Server}} {
		t.Run(s.name, func(t *testing.T) {
			r := frozenRebuild(t, s.fwd)
			var n []string
			calls = func(name string) { n = append(n, name) }
			t.Cleanup(func() { calls = nil })
			err := sockopt.WithFD(s.fwd, func(fd int) error {
				if _, err := RebuildSock(fd, r); err != nil {
					return err
				}
				calls = nil
				return LeaveRepair(fd, true)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(n) > maxRebuildCalls {
				t.Errorf("the rebuild made %d system calls, want at most %d: %v", len(n), maxRebuildCalls, n)
			}
			exchange(t, s.fwd, s.peer, "ping")
			exchange(t, s.peer, s.fwd, "pong")
		})
	}
}

// frozenRebuild freezes c and returns the Rebuild that gives it back its
// connection, with its last byte sent back in flight.
func frozenRebuild(tb testing.TB, c *net.TCPConn) Rebuild {
	tb.Helper()
	s, err := Freeze(c)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := ReadWindow(c)
	if err != nil {
		tb.Fatal(err)
	}
	ts, err := TSClock(c)
	if err != nil {
		tb.Fatal(err)
	}
	p := s.Params
	return Rebuild{
		Local: p.Local, Remote: p.Remote, SndSeq: p.WriteSeq, RcvSeq: p.RcvNxt, InFlight: 1,
		// Loopback's MSS is more than TCP_MAXSEG takes (MAX_TCP_WINDOW).
		PeerMSS: min(p.PeerMSS, 1460), WScale: p.WScale, SndWScale: p.SndWScale, RcvWScale: p.RcvWScale,
		SACK: p.SACK, Timestamps: p.Timestamps, TSClock: ts,
		SndWnd: w.SndWnd, MaxWindow: w.MaxWindow, RcvWnd: w.RcvWnd,
	}
}

// exchange writes msg on from and reads it on to.
func exchange(tb testing.TB, from, to *net.TCPConn, msg string) {
	tb.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		tb.Fatalf("write: %v", err)
	}
	to.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer to.SetReadDeadline(time.Time{})
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(to, got); err != nil || string(got) != msg {
		tb.Fatalf("read %q, %v; want %q", got, err, msg)
	}
}

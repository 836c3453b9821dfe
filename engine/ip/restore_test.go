// Tests of rebuilding a frozen socket in place: the connection carries on with the same descriptor.

package ip

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// TestRebuildSockInPlace: both of a pair's forwarder sockets, frozen and
// rebuilt from what they report with a few bytes moved into the receive
// queue by hand, carry bytes both ways through the same *net.TCPConn.
func TestRebuildSockInPlace(t *testing.T) {
	testenv.RequireRoot(t)
	el := newEngineLab(t, Options{MaxPairs: 4})
	lp := el.pair(t, "")
	for _, c := range []struct {
		name      string
		fwd, peer *net.TCPConn
	}{{"client side", lp.p.Client, lp.client}, {"upstream side", lp.p.Upstream(), lp.server}} {
		t.Run(c.name, func(t *testing.T) {
			s, err := tcprepair.Freeze(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			w, err := tcprepair.ReadWindow(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			ts, _ := tcprepair.TSClock(c.fwd)
			r := tcprepair.Rebuild{
				Local: s.Params.Local, Remote: s.Params.Remote,
				SndSeq: s.Params.WriteSeq, RcvSeq: s.Params.RcvNxt,
				PeerMSS: s.Params.PeerMSS, WScale: s.Params.WScale,
				SndWScale: s.Params.SndWScale, RcvWScale: s.Params.RcvWScale,
				SACK: s.Params.SACK, Timestamps: s.Params.Timestamps, TSClock: ts + 1,
				SndWnd: w.SndWnd, MaxWindow: w.MaxWindow, RcvWnd: w.RcvWnd,
			}
			err = sockopt.WithFD(c.fwd, func(fd int) error {
				if _, err := tcprepair.RebuildSock(fd, r); err != nil {
					return err
				}
				return tcprepair.LeaveRepair(fd, true)
			})
			if err != nil {
				t.Fatal(err)
			}
			exchange(t, c.fwd, c.peer, "ping")
			exchange(t, c.peer, c.fwd, "pong")
			// The rebuilt socket reports the options it had.
			again, err := tcprepair.Freeze(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			tcprepair.Thaw(c.fwd)
			// Sequence numbers move; the MSS the socket advertised is
			// recomputed from the route without the timestamp option's
			// 12 bytes, which only the handshake takes off.
			got, want := again.Params, s.Params
			got.WriteSeq, got.RcvNxt, got.SndUna, want.WriteSeq, want.RcvNxt, want.SndUna = 0, 0, 0, 0, 0, 0
			got.AdvMSS, want.AdvMSS = 0, 0
			if got != want || again.UsecTS != s.UsecTS {
				t.Errorf("rebuilt: %+v usec %v, was %+v usec %v", got, again.UsecTS, want, s.UsecTS)
			}
			// Control mode after an unsplice sends full-sized segments.
			if again.SndMSS != s.SndMSS {
				t.Errorf("rebuilt socket sends %d-byte segments, was %d", again.SndMSS, s.SndMSS)
			}
		})
	}
}

// exchange writes msg on from and reads it on to.
func exchange(tb testing.TB, from, to *net.TCPConn, msg string) {
	tb.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		tb.Fatalf("write: %v", err)
	}
	to.SetReadDeadline(time.Now().Add(waitFor))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(to, got); err != nil || string(got) != msg {
		tb.Fatalf("read %q, %v; want %q", got, err, msg)
	}
	to.SetReadDeadline(time.Time{})
}

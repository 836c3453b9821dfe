// Tests of rebuilding a frozen socket in place: the connection carries on with the same descriptor.

package ip

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
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
			s, err := freezeSock(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			w, err := readRepairWindow(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			ts, _ := sockTSClock(c.fwd)
			r := rebuild{
				local: s.params.Local, remote: s.params.Remote,
				sndSeq: s.params.WriteSeq, rcvSeq: s.params.RcvNxt,
				peerMSS: s.params.PeerMSS, wscale: s.params.WScale,
				sndWScale: s.params.SndWScale, rcvWScale: s.params.RcvWScale,
				sack: s.params.SACK, timestamps: s.params.Timestamps, tsClock: ts + 1,
				sndWnd: w.sndWnd, maxWindow: w.maxWindow, rcvWnd: w.rcvWnd,
			}
			err = withFD(c.fwd, func(fd int) error {
				if err := rebuildSock(fd, r); err != nil {
					return err
				}
				return leaveRepair(fd)
			})
			if err != nil {
				t.Fatal(err)
			}
			exchange(t, c.fwd, c.peer, "ping")
			exchange(t, c.peer, c.fwd, "pong")
			// The rebuilt socket reports the options it had.
			again, err := freezeSock(c.fwd)
			if err != nil {
				t.Fatal(err)
			}
			thawSock(c.fwd)
			// Sequence numbers move; the MSS the socket advertised is
			// recomputed from the route without the timestamp option's
			// 12 bytes, which only the handshake takes off.
			got, want := again.params, s.params
			got.WriteSeq, got.RcvNxt, got.SndUna, want.WriteSeq, want.RcvNxt, want.SndUna = 0, 0, 0, 0, 0, 0
			got.AdvMSS, want.AdvMSS = 0, 0
			if got != want || again.usecTS != s.usecTS {
				t.Errorf("rebuilt: %+v usec %v, was %+v usec %v", got, again.usecTS, want, s.usecTS)
			}
			// Control mode after an unsplice sends full-sized segments.
			if again.sndMSS != s.sndMSS {
				t.Errorf("rebuilt socket sends %d-byte segments, was %d", again.sndMSS, s.sndMSS)
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

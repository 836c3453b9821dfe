// Tests of the peerclock program on real connections in a lab: it finds the forwarder's sockets and reads a ts_recent within the peer's clock at the time of its last segment.

package peerclock

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// loadT loads the program or skips (fails in CI) without the privileges.
func loadT(tb testing.TB) *Reader {
	tb.Helper()
	testenv.RequireRoot(tb)
	r, err := Load()
	if err != nil {
		testenv.SkipOrFail(tb, err.Error())
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// connect opens a connection from the client namespace to a listener at
// fwd in the forwarder namespace and returns the client's end and the
// forwarder's.
func connect(tb testing.TB, l *lab.Lab, fwd netip.AddrPort) (client, accepted *net.TCPConn) {
	tb.Helper()
	ln, err := l.Fwd.Listen("tcp", fwd.String())
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Wait)
	defer cancel()
	c, err := l.Client.Dial(ctx, "tcp", fwd.String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	a, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	return c.(*net.TCPConn), a.(*net.TCPConn)
}

// TestReadTSRecent: after the client's segment has reached the forwarder's
// socket, the socket's ts_recent lies between the client's timestamp clock
// just before it sent and just after (plus a pacing lead), and the sequence numbers are those
// TCP_REPAIR reports; over IPv4 and IPv6, for either socket of a query.
func TestReadTSRecent(t *testing.T) {
	r := loadT(t)
	l := lab.NewT(t, lab.DefaultConfig())
	for _, v6 := range []bool{false, true} {
		fwd := netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7001)
		if v6 {
			fwd = netip.AddrPortFrom(l.Cfg.FwdClient6.Addr(), 7001)
		}
		client, accepted := connect(t, l, fwd)
		other, _ := connect(t, l, netip.AddrPortFrom(fwd.Addr(), 7002))
		// Let the clocks move past the handshake's.
		time.Sleep(20 * time.Millisecond)
		before, err := tcprepair.TSClock(client)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		accepted.SetReadDeadline(time.Now().Add(testenv.Wait))
		if _, err := accepted.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		after, err := tcprepair.TSClock(client)
		if err != nil {
			t.Fatal(err)
		}
		local, remote, err := tcprepair.Addrs(accepted)
		if err != nil {
			t.Fatal(err)
		}
		// The first is nobody's: the other connection's tuple with
		// the client's port off by one.
		_, otherRemote, _ := tcprepair.Addrs(other)
		conns := [2]Conn{
			{Local: netip.AddrPortFrom(fwd.Addr(), 7002), Remote: netip.AddrPortFrom(otherRemote.Addr(), otherRemote.Port()+1)},
			{Local: local, Remote: remote},
		}
		var got [2]Sock
		if err := l.Fwd.Do(func() (err error) { got, err = r.Read(conns, CurrentNetns); return err }); err != nil {
			t.Fatal(err)
		}
		if got[0].Found {
			t.Errorf("v6=%v: a socket for the unused tuple %v: %+v", v6, conns[0], got[0])
		}
		s := got[1]
		if !s.Found || s.State != 1 || !s.Stamped {
			t.Fatalf("v6=%v: %v read as %+v, want an established socket with ts_recent stored", v6, conns[1], s)
		}
		// Linux stamps a segment with its earliest departure time, which
		// pacing may put ahead of the clock TCP_TIMESTAMP reads.
		const paced = 100
		if int32(s.TSRecent-before) < 0 || int32(after+paced-s.TSRecent) < 0 {
			t.Errorf("v6=%v: ts_recent %d outside the client's clock around its segment [%d, %d+%d]", v6, s.TSRecent, before, after, paced)
		}
		if s.Age > 2*time.Second {
			t.Errorf("v6=%v: ts_recent stored %v ago, want just now", v6, s.Age)
		}
		st, err := tcprepair.Freeze(accepted)
		if err != nil {
			t.Fatal(err)
		}
		tcprepair.Thaw(accepted)
		if s.RcvNxt != st.Params.RcvNxt || s.WriteSeq != st.Params.WriteSeq {
			t.Errorf("v6=%v: rcv_nxt %d write_seq %d, TCP_REPAIR reports %d and %d", v6, s.RcvNxt, s.WriteSeq, st.Params.RcvNxt, st.Params.WriteSeq)
		}
		// The program looks in the calling thread's namespace only.
		if err := l.Client.Do(func() (err error) { got, err = r.Read(conns, CurrentNetns); return err }); err != nil {
			t.Fatal(err)
		}
		if got[1].Found {
			t.Errorf("v6=%v: found the forwarder's socket from the client's namespace: %+v", v6, got[1])
		}
		// Named by its id in the client's namespace, the forwarder's
		// namespace is looked in from there.
		if err := l.Client.Do(func() (err error) {
			h, err := netns.GetFromPath(l.Fwd.Path())
			if err != nil {
				return err
			}
			defer h.Close()
			id, err := NetnsID(h)
			if err != nil {
				return err
			}
			got, err = r.Read(conns, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !got[1].Found || got[1].RcvNxt != s.RcvNxt {
			t.Errorf("v6=%v: by the forwarder's namespace id, read %+v, want the socket read before", v6, got[1])
		}
	}
}

// TestSeqsAsSocketOptions: what the program reads of a frozen socket's
// queues, windows and clock is what the socket options report, with bytes
// queued both ways, before and after the peer's FIN (which SIOCINQ does
// not count).
func TestSeqsAsSocketOptions(t *testing.T) {
	r := loadT(t)
	l := lab.NewT(t, lab.DefaultConfig())
	client, accepted := connect(t, l, netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7003))
	// Unread by the forwarder: its receive queue.
	if _, err := client.Write(make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	// More than the client's receive buffer and window take, unread by
	// the client: the forwarder's send queue keeps what is not acknowledged.
	accepted.SetWriteBuffer(1 << 20)
	accepted.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	accepted.Write(make([]byte, 8<<20))
	for _, finned := range []bool{false, true} {
		if finned {
			if err := client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // the segments reach the socket
		want, err := tcprepair.Freeze(accepted)
		if err != nil {
			t.Fatal(err)
		}
		wantWin, err := tcprepair.ReadWindow(accepted)
		if err != nil {
			t.Fatal(err)
		}
		local, remote, _ := tcprepair.Addrs(accepted)
		var got [2]Sock
		clockBefore, err := tcprepair.TSClock(accepted)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Fwd.Do(func() (err error) {
			got, err = r.Read([2]Conn{{local, remote}, {local, remote}}, CurrentNetns)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		clockAfter, err := tcprepair.TSClock(accepted)
		if err != nil {
			t.Fatal(err)
		}
		// TCP_TIMESTAMP's lowest bit tells the unit (Linux 6.7).
		if c := got[0].TSClock(want.UsecTS) &^ 1; int32(c-clockBefore&^1) < 0 || int32(clockAfter&^1-c) < 0 {
			t.Errorf("finned=%v: the program's clock %d outside TCP_TIMESTAMP's around it [%d, %d]", finned, c, clockBefore, clockAfter)
		}
		if err := tcprepair.Thaw(accepted); err != nil {
			t.Fatal(err)
		}
		q, ok := got[0].Seqs()
		if !ok {
			t.Fatalf("finned=%v: no reading: %+v", finned, got[0])
		}
		if want.InQ != 3000 || want.OutQ == 0 || want.FINReceived != finned {
			t.Fatalf("finned=%v: the setup failed: the socket options report %+v", finned, want)
		}
		wantQ := tcprepair.Seqs{WriteSeq: want.Params.WriteSeq, RcvNxt: want.Params.RcvNxt, InQ: want.InQ, OutQ: want.OutQ, MSSClamp: want.Params.PeerMSS}
		if q != wantQ {
			t.Errorf("finned=%v: the program read %+v, the socket options %+v", finned, q, wantQ)
		}
		if w := got[0].Window(); w != wantWin {
			t.Errorf("finned=%v: the program read the windows %+v, TCP_REPAIR_WINDOW %+v", finned, w, wantWin)
		}
		wantState := uint8(1) // ESTABLISHED
		if finned {
			wantState = 8 // CLOSE_WAIT
		}
		if got[0].State != wantState {
			t.Errorf("finned=%v: state %d, want %d", finned, got[0].State, wantState)
		}
	}
}

// TestMixedFamilies: a connection whose addresses are of two families is
// refused before the program runs.
func TestMixedFamilies(t *testing.T) {
	r := &Reader{}
	_, err := r.Read([2]Conn{{Local: netip.MustParseAddrPort("10.0.0.1:1"), Remote: netip.MustParseAddrPort("[fd00::1]:2")}}, CurrentNetns)
	if err == nil {
		t.Fatal("mixed families accepted")
	}
}

func BenchmarkRead(b *testing.B) {
	r := loadT(b)
	l := lab.NewT(b, lab.DefaultConfig())
	_, a := connect(b, l, netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7001))
	local, remote, _ := tcprepair.Addrs(a)
	conns := [2]Conn{{local, remote}, {local, remote}}
	l.Fwd.Do(func() error {
		for b.Loop() {
			if _, err := r.Read(conns, CurrentNetns); err != nil {
				b.Fatal(err)
			}
		}
		return nil
	})
}

// TestReadAllocates: a reading, on every splice's path, allocates nothing
// (the program's frame is recycled) and still finds the socket.
func TestReadAllocates(t *testing.T) {
	r := loadT(t)
	l := lab.NewT(t, lab.DefaultConfig())
	_, a := connect(t, l, netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7002))
	local, remote, _ := tcprepair.Addrs(a)
	conns := [2]Conn{{local, remote}, {local, remote}}
	if err := l.Fwd.Do(func() error {
		var got [2]Sock
		var err error
		allocs := testing.AllocsPerRun(20, func() {
			if got, err = r.Read(conns, CurrentNetns); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Read allocates %v times, want 0", allocs)
		}
		if !got[0].Found || !got[1].Found {
			t.Errorf("Read found %v, %v: want both", got[0].Found, got[1].Found)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

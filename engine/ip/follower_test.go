// Tests of the follower: the end it reports from the state the datapath tracked for a pair, driven by segments run through the real program.

package ip

import (
	"net"
	"net/netip"
	"testing"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/packet"
	"github.com/splicer/splicer/lab"
)

// TestFollowerEndOfPair: the end a follower reports from the datapath's
// state. A reset after both FINs were acknowledged (a peer that already
// forgot the connection answering a late segment) leaves the end EOF; a
// reset before that is a reset.
func TestFollowerEndOfPair(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	var dp *datapath.Datapath
	var ifA, ifB int
	err := l.Fwd.Do(func() (err error) {
		if ifA, err = ifindexOf(l.Cfg.FwdClient.Addr()); err != nil {
			return err
		}
		if ifB, err = ifindexOf(l.Cfg.FwdServer.Addr()); err != nil {
			return err
		}
		dp, err = datapath.Load(datapath.Options{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })

	// The pair's sequence numbers and offsets, as the datapath tests'.
	const (
		upNxt, downNxt = 1_000_000, 5_000_000
		upOff, downOff = 1000, 0x10000000
		upAcked        = downNxt + downOff // the client acknowledged all the forwarder sent it
	)
	payload := []byte("GET / HTTP/1.1\r\nHost: splicer\r\n\r\n")
	client, fwdA := netip.AddrPortFrom(l.Cfg.Client.Addr(), 40000), netip.AddrPortFrom(l.Cfg.FwdClient.Addr(), 7000)
	server := netip.AddrPortFrom(l.Cfg.Server.Addr(), 8080)
	specFor := func(clientPort uint16) datapath.PairSpec {
		fwdB := netip.AddrPortFrom(l.Cfg.FwdServer.Addr(), clientPort+10000)
		return datapath.PairSpec{
			A:        datapath.Tuple{Src: netip.AddrPortFrom(client.Addr(), clientPort), Dst: fwdA},
			B:        datapath.Tuple{Src: server, Dst: fwdB},
			IfindexA: ifA, IfindexB: ifB,
			Up:   datapath.DirSpec{SeqOff: upOff, TSOff: 500, InShift: 7, OutShift: 7, SndNxt: upNxt, AckHi: upAcked, TSLast: 100},
			Down: datapath.DirSpec{SeqOff: downOff, TSOff: 9000, InShift: 7, OutShift: 7, SndNxt: downNxt, AckHi: upNxt + upOff, TSLast: 7000},
		}
	}
	insert := func(spec datapath.PairSpec) {
		t.Helper()
		if err := dp.Insert(spec); err != nil {
			t.Fatalf("Insert: %v", err)
		}
		t.Cleanup(func() { dp.Delete(spec.A) })
	}
	// send runs a segment arriving on device dev through the program,
	// which must translate and redirect it; up and down send it from the
	// client and the server.
	send := func(s packet.Seg, dev int) {
		t.Helper()
		var verdict int32
		err := l.Fwd.Do(func() (err error) { verdict, _, err = dp.Run(s.Bytes(), dev); return err })
		if err != nil || verdict != 7 { // TC_ACT_REDIRECT
			t.Fatalf("segment seq %d ack %d flags %#x: verdict %d, %v; want redirect", s.Seq, s.Ack, s.Flags, verdict, err)
		}
	}
	up := func(spec datapath.PairSpec, s packet.Seg) { s.Src, s.Dst = spec.A.Src, spec.A.Dst; send(s, ifA) }
	down := func(spec datapath.PairSpec, s packet.Seg) { s.Src, s.Dst = spec.B.Src, spec.B.Dst; send(s, ifB) }
	follow := func(a datapath.Tuple) (engine.Result, bool) {
		f := follower{p: engine.NewPair(1, "t", nil), a: a, dp: dp, lastMove: monoNow()}
		return f.onTick(0)
	}

	spec := specFor(40000)
	insert(spec)
	up(spec, packet.Seg{Seq: upNxt, Ack: upAcked, Flags: packet.ACK | packet.FIN, Payload: payload})
	clientFINEnd := uint32(upNxt + len(payload) + 1)
	down(spec, packet.Seg{Seq: downNxt, Ack: clientFINEnd + upOff, Flags: packet.ACK | packet.FIN})
	if res, done := follow(spec.A); done {
		t.Fatalf("with both FINs sent, one acknowledged, the follower ended: %+v", res)
	}
	up(spec, packet.Seg{Seq: clientFINEnd, Ack: upAcked + 1, Flags: packet.ACK})
	down(spec, packet.Seg{Seq: downNxt + 1, Flags: packet.RST})
	if st, err := dp.Lookup(spec.A); err != nil || st.Phase != datapath.PhaseClosed {
		t.Fatalf("phase %v (%v) after the late reset, want closed", st.Phase, err)
	}
	if res, done := follow(spec.A); !done || res.End != engine.EndEOF || res.Moved != [2]int64{int64(len(payload)), 0} {
		t.Errorf("reset after TIME_WAIT: follower ended %v with %+v, want EOF", done, res)
	}

	spec = specFor(40001)
	insert(spec)
	down(spec, packet.Seg{Seq: downNxt, Flags: packet.RST})
	if res, done := follow(spec.A); !done || res.End != engine.EndReset {
		t.Errorf("reset of an open pair: follower ended %v with %+v, want reset", done, res)
	}
}

// ifindexOf is the index of the device that holds address a.
func ifindexOf(a netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return 0, err
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.Index, nil
				}
			}
		}
	}
	return 0, &net.AddrError{Err: "no device holds the address", Addr: a.String()}
}

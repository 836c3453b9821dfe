// Tests for CanTranslate and NewPairSpec, and for the ABI the Go side shares with bpf/splice.h; none needs privileges.

package datapath

import (
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"github.com/splicer/splicer/engine"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

func connPair() (a, b tcprepair.ConnParams) {
	a = tcprepair.ConnParams{
		Local: topo4.fa, Remote: topo4.client, Ifindex: 3,
		WScale: true, SndWScale: 7, RcvWScale: 9,
		Timestamps: true, SACK: true,
		WriteSeq: 5000, RcvNxt: 1000, SndUna: 4900,
		TSVal: 70_000, PeerTSVal: 100,
		AdvMSS: 1460, PeerMSS: 1460,
	}
	b = tcprepair.ConnParams{
		Local: topo4.fb, Remote: topo4.server, Ifindex: 4,
		WScale: true, SndWScale: 2, RcvWScale: 8,
		Timestamps: true, SACK: true,
		WriteSeq: 0xfffffff0, RcvNxt: 777, SndUna: 0xffffff00,
		TSVal: 50, PeerTSVal: 9_000,
		AdvMSS: 1460, PeerMSS: 1460,
	}
	return a, b
}

func TestCanTranslate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(a, b *tcprepair.ConnParams)
		want  string // substring of the error; "" for supported
	}{
		{name: "same options", tweak: func(a, b *tcprepair.ConnParams) {}},
		{name: "window scaling on one side only", tweak: func(a, b *tcprepair.ConnParams) { b.WScale = false }},
		{name: "SACK on one side only", tweak: func(a, b *tcprepair.ConnParams) { a.SACK = false }},
		{name: "nothing negotiated", tweak: func(a, b *tcprepair.ConnParams) {
			*a = tcprepair.ConnParams{Local: a.Local, Remote: a.Remote}
			*b = tcprepair.ConnParams{Local: b.Local, Remote: b.Remote}
		}},
		{name: "timestamps on the client side only", tweak: func(a, b *tcprepair.ConnParams) { b.Timestamps = false }, want: "timestamps negotiated on A"},
		{name: "timestamps on the server side only", tweak: func(a, b *tcprepair.ConnParams) { a.Timestamps = false }, want: "timestamps negotiated on B"},
		{name: "ECN on one side", tweak: func(a, b *tcprepair.ConnParams) { a.ECN = true }, want: "ECN"},
		{name: "signed segments", tweak: func(a, b *tcprepair.ConnParams) { b.Signed = true }, want: "TCP-MD5"},
		{name: "MPTCP", tweak: func(a, b *tcprepair.ConnParams) { a.MPTCP = true }, want: "MPTCP"},
		{name: "IPv4 and IPv6", tweak: func(a, b *tcprepair.ConnParams) { b.Local, b.Remote = topo6.fb, topo6.server }, want: "address families differ"},
		{name: "client MSS above what the server accepts", tweak: func(a, b *tcprepair.ConnParams) { b.PeerMSS = 1400 }, want: "client may send 1460-byte segments, the server accepts 1400"},
		{name: "IPv4-mapped addresses count as IPv4", tweak: func(a, b *tcprepair.ConnParams) {
			a.Remote = netip.AddrPortFrom(netip.AddrFrom16(topo4.client.Addr().As16()), a.Remote.Port())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := connPair()
			tc.tweak(&a, &b)
			err := CanTranslate(a, b)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want an error about %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestNewPairSpec(t *testing.T) {
	a, b := connPair()
	spec, err := NewPairSpec(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if spec.A != topo4.a() || spec.B != topo4.b() || spec.IfindexA != 3 || spec.IfindexB != 4 {
		t.Errorf("tuples %v %v devices %d %d", spec.A, spec.B, spec.IfindexA, spec.IfindexB)
	}
	// The client's next byte becomes B's next byte, and the server's next
	// byte becomes A's, wrapping at 2^32.
	if got := a.RcvNxt + spec.Up.SeqOff; got != b.WriteSeq {
		t.Errorf("client seq %d maps to %d, want B.write_seq %d", a.RcvNxt, got, b.WriteSeq)
	}
	if got := b.RcvNxt + spec.Down.SeqOff; got != a.WriteSeq {
		t.Errorf("server seq %d maps to %d, want A.write_seq %d", b.RcvNxt, got, a.WriteSeq)
	}
	// PAWS: the client's clock continues where the forwarder's B socket was.
	if got := a.PeerTSVal + spec.Up.TSOff; got != b.TSVal {
		t.Errorf("client TSval %d maps to %d, want %d", a.PeerTSVal, got, b.TSVal)
	}
	if got := b.PeerTSVal + spec.Down.TSOff; got != a.TSVal {
		t.Errorf("server TSval %d maps to %d, want %d", b.PeerTSVal, got, a.TSVal)
	}
	// Windows: the client scales its windows by its shift (A's snd_wscale),
	// the server reads the forwarder's by B's rcv_wscale; and the mirror.
	if spec.Up.InShift != 7 || spec.Up.OutShift != 8 || spec.Down.InShift != 2 || spec.Down.OutShift != 9 {
		t.Errorf("shifts up %d->%d down %d->%d", spec.Up.InShift, spec.Up.OutShift, spec.Down.InShift, spec.Down.OutShift)
	}
	if spec.Up.SndNxt != a.RcvNxt || spec.Up.AckHi != a.SndUna || spec.Down.SndNxt != b.RcvNxt || spec.Down.AckHi != b.SndUna {
		t.Errorf("tracking seeds up %+v down %+v", spec.Up, spec.Down)
	}
	a.SACK = false
	if spec, _ := NewPairSpec(a, b); spec.Up.StripSACK || !spec.Down.StripSACK {
		t.Errorf("SACK only on B: strip up %v down %v, want only down", spec.Up.StripSACK, spec.Down.StripSACK)
	}
	a.Timestamps = false
	if _, err := NewPairSpec(a, b); err == nil {
		t.Error("NewPairSpec accepted timestamps on one side only")
	}
}

// TestABI keeps the Go mirror of bpf/splice.h and README.md's figures honest.
func TestABI(t *testing.T) {
	if got := unsafe.Sizeof(spliceSpliceKey{}); got != 40 {
		t.Errorf("struct splice_key is %d bytes, README says 40", got)
	}
	if got := unsafe.Sizeof(spliceSpliceDir{}); got != 104 {
		t.Errorf("struct splice_dir is %d bytes, README says 104", got)
	}
	spec, err := loadSplice()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Maps[spliceMapSpliceCounters].MaxEntries; got != uint32(spliceSpliceCounterSPLICE_CNT_MAX) {
		t.Errorf("the counters map has %d entries, enum splice_counter %d", got, spliceSpliceCounterSPLICE_CNT_MAX)
	}
	if len(counterNames) != int(spliceSpliceCounterSPLICE_CNT_MAX) {
		t.Errorf("the program has %d counters, Go names %d", spliceSpliceCounterSPLICE_CNT_MAX, len(counterNames))
	}
	for i, name := range counterNames {
		if name == "" {
			t.Errorf("counter %d has no name", i)
		}
	}
	for _, m := range []struct {
		c spliceSpliceMode
		g engine.Mode
	}{{spliceSpliceModeSPLICE_MODE_FORWARD, engine.Forward}, {spliceSpliceModeSPLICE_MODE_WATCH, engine.Watch}, {spliceSpliceModeSPLICE_MODE_HOLD, engine.Hold}} {
		if uint32(m.c) != uint32(m.g) {
			t.Errorf("enum splice_mode %d is engine.Mode %v", m.c, m.g)
		}
	}
	if got := spec.Maps[spliceMapSpliceEvents].MaxEntries; got != 256<<10 {
		t.Errorf("ring buffer default %d", got)
	}
	k, err := topo6.a().key()
	if err != nil || tupleFromKey(k) != topo6.a() {
		t.Errorf("IPv6 key round trip: %v %v", tupleFromKey(k), err)
	}
	k, err = topo4.b().key()
	if err != nil || tupleFromKey(k) != topo4.b() || k.Family != afInet || k.Sport != 0x901f {
		t.Errorf("IPv4 key round trip: %+v %v", k, err)
	}
}

func TestPhaseOf(t *testing.T) {
	for _, tc := range []struct {
		up, down uint32
		want     Phase
	}{
		{0, 0, PhaseSpliced},
		{flagFINSeen, 0, PhaseFINRelayed1},
		{0, flagFINSeen | flagFINAcked, PhaseACKRelayed1},
		{flagFINSeen, flagFINSeen | flagFINAcked, PhaseFINRelayed2},
		{flagFINSeen | flagFINAcked | flagTimeWait, flagFINSeen | flagFINAcked | flagTimeWait, PhaseTimeWait},
		{flagFINSeen | flagClosed, flagClosed, PhaseClosed},
	} {
		if got := phaseOf(tc.up, tc.down); got != tc.want {
			t.Errorf("phaseOf(%#x, %#x) = %v, want %v", tc.up, tc.down, got, tc.want)
		}
	}
}

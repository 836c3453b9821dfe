// Tests of the drain's GSO packets: their headers against the per-segment ones, and owed bytes delivered in them, intact, over IPv4 and IPv6.

package ip

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
)

// TestBuildGSOCompletesToSegment: a GSO packet whose checksum is
// completed as a device does for CHECKSUM_PARTIAL (the one's complement
// of the sum from csum_start, over the pseudo-header sum left in the
// field) is buildSegment's packet, and its virtio-net header describes
// it.
func TestBuildGSOCompletesToSegment(t *testing.T) {
	payload := make([]byte, 3*1448+17)
	rand.Read(payload)
	for _, tc := range []struct {
		name     string
		src, dst netip.AddrPort
		ts       bool
		gsoType  byte
	}{
		{"ipv4", netip.MustParseAddrPort("10.0.0.1:80"), netip.MustParseAddrPort("10.0.0.2:40000"), false, unix.VIRTIO_NET_HDR_GSO_TCPV4},
		{"ipv4 timestamps", netip.MustParseAddrPort("10.0.0.1:80"), netip.MustParseAddrPort("10.0.0.2:40000"), true, unix.VIRTIO_NET_HDR_GSO_TCPV4},
		{"ipv6 timestamps", netip.MustParseAddrPort("[fd00::1]:80"), netip.MustParseAddrPort("[fd00::2]:40000"), true, unix.VIRTIO_NET_HDR_GSO_TCPV6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := segFields{ack: 7, win: 512, ts: tc.ts, tsVal: 11, tsEcr: 13, fin: true}
			p := &linkPath{ifindex: 1, eth: [ethHdrLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00}}
			got := buildGSO(make([]byte, 1<<17), p, tc.src, tc.dst, 1000, f, payload, 1448)
			want := buildSegment(make([]byte, 1<<17), tc.src, tc.dst, 1000, f, payload)
			v := got[:vnetHdrLen]
			start := int(binary.NativeEndian.Uint16(v[6:]))
			if v[0] != unix.VIRTIO_NET_HDR_F_NEEDS_CSUM || v[1] != tc.gsoType || binary.NativeEndian.Uint16(v[4:]) != 1448 || binary.NativeEndian.Uint16(v[8:]) != 16 {
				t.Fatalf("virtio-net header %x", v)
			}
			frame := got[vnetHdrLen:]
			if hdrLen := int(binary.NativeEndian.Uint16(v[2:])); hdrLen != len(frame)-len(payload) {
				t.Errorf("hdr_len %d, want %d", hdrLen, len(frame)-len(payload))
			}
			if !bytes.Equal(frame[:ethHdrLen], p.eth[:]) {
				t.Errorf("Ethernet header %x, want %x", frame[:ethHdrLen], p.eth)
			}
			tcp := frame[start:]
			binary.BigEndian.PutUint16(tcp[16:], ^uint16(checksum(0, tcp)))
			if !bytes.Equal(frame[ethHdrLen:], want) {
				t.Errorf("completed GSO packet\n%x\nwant\n%x", frame[ethHdrLen:ethHdrLen+80], want[:80])
			}
		})
	}
}

// TestEngineDrainsInGSOPackets: owed bytes of many segments are
// delivered in GSO packets, far fewer than the segments they make, and
// arrive intact, in each direction over IPv4 and IPv6.
func TestEngineDrainsInGSOPackets(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	for _, v6 := range []bool{false, true} {
		for _, from := range []engine.Direction{engine.Up, engine.Down} {
			t.Run(fmt.Sprintf("%s ipv6=%v", from, v6), func(t *testing.T) {
				testDrainInGSOPackets(t, el, v6, from)
			})
		}
	}
}

func testDrainInGSOPackets(t *testing.T, el *engineLab, v6 bool, from engine.Direction) {
	lp := el.pairOf(t, "", v6)
	src, dst := lp.client, lp.server
	if from == engine.Down {
		src, dst = dst, src
	}
	early := make([]byte, 96000)
	rand.Read(early)
	if _, err := src.Write(early); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the early bytes in the forwarder's receive queue", func() bool {
		n, err := engine.Readable(lp.p.Src(from))
		return err == nil && n == len(early)
	})
	mss := maxSeg(t, lp.p.Dst(from))
	before := el.e.Counters()
	done := el.splice(t, context.Background(), lp, engine.Both(0))
	late := []byte(" and after")
	src.Write(late)
	src.CloseWrite()
	if got := testenv.ReadAll(t, dst); !bytes.Equal(got, append(early, late...)) {
		t.Fatalf("after the splice %d bytes arrived, want %d (intact: %v)", len(got), len(early)+len(late), bytes.HasPrefix(got, early))
	}
	dst.CloseWrite()
	testenv.ReadAll(t, src)
	result(t, done, engine.EndEOF)
	after := el.e.Counters()
	packets := after["drained_packets"] - before["drained_packets"]
	gso := after["drained_gso_packets"] - before["drained_gso_packets"]
	resent := after["drained_retransmits"] - before["drained_retransmits"]
	segs := uint64((len(early) + mss - 1) / mss)
	t.Logf("%d owed bytes (%d segments of %d) in %d packets, %d of them GSO; %d segments retransmitted", len(early), segs, mss, packets, gso, resent)
	if gso == 0 || packets > segs/4 {
		t.Errorf("%d owed bytes (%d segments of %d) went in %d packets, %d of them GSO; want GSO packets, at most %d packets", len(early), segs, mss, packets, gso, segs/4)
	}
	// Lost GSO packets would have been retransmitted one segment at a
	// time: the receiver got them (a spurious timeout under load may
	// still resend a few).
	if resent > segs/4 {
		t.Errorf("%d of %d segments retransmitted: the GSO packets did not reach the receiver", resent, segs)
	}
}

// maxSeg is c's TCP_MAXSEG: the MSS the drain cuts owed bytes to.
func maxSeg(tb testing.TB, c *net.TCPConn) int {
	tb.Helper()
	var mss int
	err := sockopt.WithFD(c, func(fd int) error {
		var err error
		mss, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return mss
}

// Building the segments the engine injects: IPv4 and IPv6 headers, the TCP header and its checksum from scratch, kept segments rebuilt; and sequence-number arithmetic.

package ip

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
)

// segFields are the header fields of one injected segment besides seq and
// payload.
type segFields struct {
	ack          uint32
	win          uint16
	tsVal, tsEcr uint32
	ts           bool
	fin          bool
	// flags replaces ACK|PSH (and FIN) when not 0.
	flags uint8
}

// buildSegment writes an IPv4 or IPv6 packet carrying one TCP segment
// with ACK and PSH into buf and returns it; checksums included.
func buildSegment(buf []byte, src, dst netip.AddrPort, seq uint32, f segFields, payload []byte) []byte {
	pkt, tcp := writeSegment(buf, src, dst, seq, f, payload)
	binary.BigEndian.PutUint16(tcp[16:], ^uint16(checksum(pseudoSum(src.Addr(), dst.Addr(), len(tcp)), tcp)))
	return pkt
}

// writeSegment is buildSegment without the TCP checksum (0): it returns
// the packet and its TCP part.
func writeSegment(buf []byte, src, dst netip.AddrPort, seq uint32, f segFields, payload []byte) (pkt, tcp []byte) {
	tcpLen := 20 + len(payload)
	if f.ts {
		tcpLen += tsOptLen
	}
	ipLen := 20
	if !src.Addr().Is4() {
		ipLen = 40
	}
	pkt = buf[:ipLen+tcpLen]
	clear(pkt[:ipLen+tcpLen-len(payload)])
	putIPHeader(pkt[:ipLen], src.Addr(), dst.Addr(), tcpLen)
	tcp = pkt[ipLen:]
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], f.ack)
	hlen := 20
	if f.ts {
		hlen += tsOptLen
		o := tcp[20:]
		o[0], o[1], o[2], o[3] = 1, 1, 8, 10
		binary.BigEndian.PutUint32(o[4:], f.tsVal)
		binary.BigEndian.PutUint32(o[8:], f.tsEcr)
	}
	tcp[12] = byte(hlen/4) << 4
	tcp[13] = 0x18 // ACK, PSH
	if f.fin {
		tcp[13] |= 0x01
	}
	if f.flags != 0 {
		tcp[13] = f.flags
	}
	binary.BigEndian.PutUint16(tcp[14:], f.win)
	copy(tcp[hlen:], payload)
	return pkt, tcp
}

// buildKept writes into buf an IPv4 or IPv6 packet carrying a kept
// record of flow (Src the peer, Dst the forwarder) as its sender sent it:
// the segment's own TCP header, with the record's seq, FIN only on the
// segment's last record, and checksums computed again (a kept header's
// checksum field may be partial).
func buildKept(buf []byte, flow datapath.Tuple, k datapath.KeptSeg) []byte {
	src, dst := flow.Src.Addr(), flow.Dst.Addr()
	tcpLen := len(k.Header) + len(k.Data)
	ipLen := 20
	if !src.Is4() {
		ipLen = 40
	}
	pkt := buf[:ipLen+tcpLen]
	clear(pkt[:ipLen])
	putIPHeader(pkt[:ipLen], src, dst, tcpLen)
	tcp := pkt[ipLen:]
	copy(tcp, k.Header)
	copy(tcp[len(k.Header):], k.Data)
	binary.BigEndian.PutUint32(tcp[4:], k.Seq)
	if !k.Last {
		tcp[13] &^= 0x01 // the FIN follows the segment's last record
	}
	tcp[16], tcp[17] = 0, 0
	binary.BigEndian.PutUint16(tcp[16:], ^uint16(checksum(pseudoSum(src, dst, tcpLen), tcp)))
	return pkt
}

// putIPHeader writes into ip (20 bytes for IPv4, 40 for IPv6, zeroed) the
// header of a packet from src to dst carrying tcpLen bytes of TCP: DF
// like the endpoints' own segments, TTL/hop limit 64, IPv4 checksum.
func putIPHeader(ip []byte, src, dst netip.Addr, tcpLen int) {
	if src.Is4() {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+tcpLen))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		ip[8] = 64
		ip[9] = unix.IPPROTO_TCP
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^uint16(checksum(0, ip)))
		return
	}
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
	ip[6] = unix.IPPROTO_TCP
	ip[7] = 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
}

// pseudoSum is the one's-complement sum of the TCP pseudo-header.
func pseudoSum(src, dst netip.Addr, tcpLen int) uint32 {
	var sum uint32
	s, d := src.AsSlice(), dst.AsSlice()
	sum = checksum(sum, s)
	sum = checksum(sum, d)
	return sum + unix.IPPROTO_TCP + uint32(tcpLen)
}

// checksum adds b to the one's-complement sum and folds it to 16 bits.
func checksum(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum
}

func seqLess(a, b uint32) bool { return int32(a-b) < 0 }

func seqMax(a, b uint32) uint32 {
	if seqLess(a, b) {
		return b
	}
	return a
}

func seqMin(a, b uint32) uint32 {
	if seqLess(a, b) {
		return a
	}
	return b
}

func rescaleWindow(w uint16, in, out uint8) uint16 {
	v := uint64(w) << min(in, 14) >> min(out, 14)
	return uint16(min(v, 0xffff))
}

// Test helpers: a minimal Ethernet/IPv4/IPv6/TCP packet builder, parser and full checksum computation.

package ip

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpURG = 0x20

	ethLen = 14
)

// seg describes a packet to build. Zero overrides mean "computed".
type seg struct {
	src, dst netip.AddrPort
	seq, ack uint32
	flags    uint8
	win      uint16
	urg      uint16
	opts     []byte // raw TCP options; padded with EOL to a multiple of 4
	payload  []byte

	ttl      uint8  // default 64
	ipID     uint16 // IPv4 identification
	mf       bool   // IPv4 more-fragments
	fragOff  uint16 // IPv4 fragment offset, in 8-byte units
	ipOpts   []byte // IPv4 options (multiple of 4)
	doff     int    // TCP data offset override, in 32-bit words
	ipLenFix int    // added to the IP length field (total length / payload length)
	pad      int    // trailing Ethernet padding bytes after the IP packet
	cut      int    // truncate the frame to this many bytes
}

func optNOP() []byte { return []byte{1} }

func optTS(val, ecr uint32) []byte {
	b := []byte{8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[2:], val)
	binary.BigEndian.PutUint32(b[6:], ecr)
	return b
}

func optSACK(edges ...uint32) []byte {
	b := []byte{5, byte(2 + 4*len(edges))}
	for _, e := range edges {
		b = binary.BigEndian.AppendUint32(b, e)
	}
	return b
}

func optMSS(mss uint16) []byte { return []byte{2, 4, byte(mss >> 8), byte(mss)} }

func optUnknown(kind byte, data ...byte) []byte {
	return append([]byte{kind, byte(2 + len(data))}, data...)
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// bytes builds the frame with correct checksums (before overrides that
// break the headers on purpose).
func (s seg) bytes() []byte {
	v6 := s.src.Addr().Is6() && !s.src.Addr().Is4In6()
	opts := append([]byte(nil), s.opts...)
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	tcp := make([]byte, 20, 20+len(opts)+len(s.payload))
	binary.BigEndian.PutUint16(tcp[0:], s.src.Port())
	binary.BigEndian.PutUint16(tcp[2:], s.dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], s.seq)
	binary.BigEndian.PutUint32(tcp[8:], s.ack)
	tcp[12] = byte((20 + len(opts)) / 4 << 4)
	tcp[13] = s.flags
	binary.BigEndian.PutUint16(tcp[14:], s.win)
	binary.BigEndian.PutUint16(tcp[18:], s.urg)
	tcp = append(tcp, opts...)
	tcp = append(tcp, s.payload...)

	ttl := s.ttl
	if ttl == 0 {
		ttl = 64
	}
	eth := make([]byte, ethLen)
	copy(eth[0:6], []byte{0x02, 0, 0, 0, 0, 0xf})
	copy(eth[6:12], []byte{0x02, 0, 0, 0, 0, 0xc})
	var ip []byte
	if v6 {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
		ip[6] = 6
		ip[7] = ttl
		a, b := s.src.Addr().As16(), s.dst.Addr().As16()
		copy(ip[8:24], a[:])
		copy(ip[24:40], b[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20+len(s.ipOpts))
		ip[0] = 0x40 | byte(len(ip)/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(tcp)))
		binary.BigEndian.PutUint16(ip[4:], s.ipID)
		frag := s.fragOff & 0x1fff
		if s.mf {
			frag |= 0x2000
		} else {
			frag |= 0x4000 // DF, as TCP sends
		}
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[8] = ttl
		ip[9] = 6
		a, b := s.src.Addr().As4(), s.dst.Addr().As4()
		copy(ip[12:16], a[:])
		copy(ip[16:20], b[:])
		copy(ip[20:], s.ipOpts)
	}
	frame := cat(eth, ip, tcp, make([]byte, s.pad))
	fixChecksums(frame)
	// Break the headers only now, as a buggy or hostile sender would.
	l4 := ethLen + len(ip)
	if s.doff != 0 {
		frame[l4+12] = byte(s.doff << 4)
	}
	if s.ipLenFix != 0 {
		at := ethLen + 2
		if v6 {
			at = ethLen + 4
		}
		binary.BigEndian.PutUint16(frame[at:], uint16(int(binary.BigEndian.Uint16(frame[at:]))+s.ipLenFix))
	}
	if s.cut > 0 && s.cut < len(frame) {
		frame = frame[:s.cut]
	}
	return frame
}

// pktInfo locates the headers of a well-formed frame.
type pktInfo struct {
	v6       bool
	l4, end  int // TCP header offset; end of the IP packet
	hlen     int // TCP header length
	src, dst netip.AddrPort
}

func parseFrame(f []byte) (pktInfo, error) {
	var p pktInfo
	if len(f) < ethLen+20 {
		return p, fmt.Errorf("frame of %d bytes", len(f))
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[ethLen]&0xf) * 4
		p.l4 = ethLen + ihl
		p.end = ethLen + int(binary.BigEndian.Uint16(f[ethLen+2:]))
		p.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[ethLen+12:ethLen+16])), 0)
		p.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[ethLen+16:ethLen+20])), 0)
	case 0x86dd:
		p.v6 = true
		p.l4 = ethLen + 40
		p.end = p.l4 + int(binary.BigEndian.Uint16(f[ethLen+4:]))
		p.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[ethLen+8:ethLen+24])), 0)
		p.dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[ethLen+24:ethLen+40])), 0)
	default:
		return p, fmt.Errorf("ethertype %#x", binary.BigEndian.Uint16(f[12:]))
	}
	if p.end > len(f) || p.l4+20 > p.end {
		return p, fmt.Errorf("IP length %d, frame %d", p.end, len(f))
	}
	p.hlen = int(f[p.l4+12]>>4) * 4
	if p.hlen < 20 || p.l4+p.hlen > p.end {
		return p, fmt.Errorf("TCP data offset %d", p.hlen)
	}
	p.src = netip.AddrPortFrom(p.src.Addr(), binary.BigEndian.Uint16(f[p.l4:]))
	p.dst = netip.AddrPortFrom(p.dst.Addr(), binary.BigEndian.Uint16(f[p.l4+2:]))
	return p, nil
}

// sum16 is the one's-complement sum of b as big-endian 16-bit words.
func sum16(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func fold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// tcpChecksum computes the TCP checksum of the frame from scratch, with
// the checksum field taken as zero.
func tcpChecksum(f []byte, p pktInfo) uint16 {
	var sum uint32
	l := p.end - p.l4
	if p.v6 {
		sum = sum16(sum, f[ethLen+8:ethLen+40])
		sum += uint32(l>>16) + uint32(l&0xffff) + 6
	} else {
		sum = sum16(sum, f[ethLen+12:ethLen+20])
		sum += uint32(l) + 6
	}
	tcp := append([]byte(nil), f[p.l4:p.end]...)
	tcp[16], tcp[17] = 0, 0
	return fold(sum16(sum, tcp))
}

func ipv4Checksum(f []byte) uint16 {
	ihl := int(f[ethLen]&0xf) * 4
	h := append([]byte(nil), f[ethLen:ethLen+ihl]...)
	h[10], h[11] = 0, 0
	return fold(sum16(0, h))
}

// fixChecksums recomputes every checksum of the frame, as a sender would.
func fixChecksums(f []byte) {
	p, err := parseFrame(f)
	if err != nil {
		panic(err)
	}
	if !p.v6 {
		binary.BigEndian.PutUint16(f[ethLen+10:], ipv4Checksum(f))
	}
	binary.BigEndian.PutUint16(f[p.l4+16:], tcpChecksum(f, p))
}

// checkChecksums verifies every checksum of the frame by full recomputation.
func checkChecksums(f []byte) error {
	p, err := parseFrame(f)
	if err != nil {
		return err
	}
	if !p.v6 {
		if got, want := binary.BigEndian.Uint16(f[ethLen+10:]), ipv4Checksum(f); got != want {
			return fmt.Errorf("IPv4 header checksum %#04x, recomputed %#04x", got, want)
		}
	}
	if got, want := binary.BigEndian.Uint16(f[p.l4+16:]), tcpChecksum(f, p); got != want {
		return fmt.Errorf("TCP checksum %#04x, recomputed %#04x", got, want)
	}
	return nil
}

func netipPort(ap netip.AddrPort, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr(), port)
}

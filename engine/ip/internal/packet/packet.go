// Package packet builds and parses the Ethernet/IPv4/IPv6/TCP frames engine ip's datapath tests feed the program, and checks their checksums from scratch.
//
// It is a test fixture kept apart from the datapath on purpose: an
// independent encoding of the wire format, so a test that passes agrees
// with TCP, not only with the program.
package packet

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// TCP flags and the Ethernet header length.
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
	PSH = 0x08
	ACK = 0x10
	URG = 0x20

	EthLen = 14
)

// Seg describes a packet to build. Zero overrides mean "computed".
type Seg struct {
	Src, Dst netip.AddrPort
	Seq, Ack uint32
	Flags    uint8
	Win      uint16
	Urg      uint16
	Opts     []byte // raw TCP options; padded with EOL to a multiple of 4
	Payload  []byte

	TTL      uint8  // default 64
	IPID     uint16 // IPv4 identification
	MF       bool   // IPv4 more-fragments
	FragOff  uint16 // IPv4 fragment offset, in 8-byte units
	IPOpts   []byte // IPv4 options (multiple of 4)
	Doff     int    // TCP data offset override, in 32-bit words
	IPLenFix int    // added to the IP length field (total length / payload length)
	Pad      int    // trailing Ethernet padding bytes after the IP packet
	Cut      int    // truncate the frame to this many bytes
	// Ext6 are IPv6 extension headers between the fixed header and TCP,
	// in order; their next-header fields are filled in.
	Ext6 []Ext6
}

// Ext6 is one IPv6 extension header: its protocol number and its bytes
// after the next-header field (length, options, fragment offset...).
type Ext6 struct {
	Proto uint8
	Body  []byte
}

// IPv6 extension header protocol numbers.
const (
	HopByHop = 0
	Routing  = 43
	Fragment = 44
	AH       = 51
	DestOpts = 60
)

// ExtOpts6 is a hop-by-hop or destination options header (proto) padded
// with PadN to 8 bytes.
func ExtOpts6(proto uint8) Ext6 { return Ext6{proto, []byte{0, 1, 4, 0, 0, 0, 0}} }

// ExtFrag6 is a fragment header at offset off (in 8-byte units), more
// fragments following if more.
func ExtFrag6(off uint16, more bool) Ext6 {
	fo := off << 3
	if more {
		fo |= 1
	}
	return Ext6{Fragment, []byte{0, byte(fo >> 8), byte(fo), 0, 0, 0, 42}}
}

// ext6Len is the length of the extension header at h, from its own
// length field, as a receiver reads it.
func ext6Len(proto uint8, h []byte) int {
	switch proto {
	case Fragment:
		return 8
	case AH:
		return (int(h[1]) + 2) * 4
	}
	return (int(h[1]) + 1) * 8
}

// isExt6 reports whether proto is an extension header Parse walks.
func isExt6(proto uint8) bool {
	switch proto {
	case HopByHop, Routing, Fragment, AH, DestOpts, 135, 139, 140:
		return true
	}
	return false
}

// OptNOP is a NOP option.
func OptNOP() []byte { return []byte{1} }

// OptTS is a timestamp option.
func OptTS(val, ecr uint32) []byte {
	b := []byte{8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[2:], val)
	binary.BigEndian.PutUint32(b[6:], ecr)
	return b
}

// OptSACK is a SACK option with the given block edges.
func OptSACK(edges ...uint32) []byte {
	b := []byte{5, byte(2 + 4*len(edges))}
	for _, e := range edges {
		b = binary.BigEndian.AppendUint32(b, e)
	}
	return b
}

// OptMSS is an MSS option.
func OptMSS(mss uint16) []byte { return []byte{2, 4, byte(mss >> 8), byte(mss)} }

// OptUnknown is an option of a kind the program does not know.
func OptUnknown(kind byte, data ...byte) []byte {
	return append([]byte{kind, byte(2 + len(data))}, data...)
}

// Cat concatenates options.
func Cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Bytes builds the frame with correct checksums (before overrides that
// break the headers on purpose).
func (s Seg) Bytes() []byte {
	v6 := s.Src.Addr().Is6() && !s.Src.Addr().Is4In6()
	opts := append([]byte(nil), s.Opts...)
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	tcp := make([]byte, 20, 20+len(opts)+len(s.Payload))
	binary.BigEndian.PutUint16(tcp[0:], s.Src.Port())
	binary.BigEndian.PutUint16(tcp[2:], s.Dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], s.Seq)
	binary.BigEndian.PutUint32(tcp[8:], s.Ack)
	tcp[12] = byte((20 + len(opts)) / 4 << 4)
	tcp[13] = s.Flags
	binary.BigEndian.PutUint16(tcp[14:], s.Win)
	binary.BigEndian.PutUint16(tcp[18:], s.Urg)
	tcp = append(tcp, opts...)
	tcp = append(tcp, s.Payload...)

	ttl := s.TTL
	if ttl == 0 {
		ttl = 64
	}
	eth := make([]byte, EthLen)
	copy(eth[0:6], []byte{0x02, 0, 0, 0, 0, 0xf})
	copy(eth[6:12], []byte{0x02, 0, 0, 0, 0, 0xc})
	var ip []byte
	if v6 {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		next := 6 // where the next header's protocol goes
		for _, x := range s.Ext6 {
			ip[next] = x.Proto
			next = len(ip)
			ip = append(ip, 0)
			ip = append(ip, x.Body...)
		}
		ip[next] = 6
		binary.BigEndian.PutUint16(ip[4:], uint16(len(ip)-40+len(tcp)))
		ip[7] = ttl
		a, b := s.Src.Addr().As16(), s.Dst.Addr().As16()
		copy(ip[8:24], a[:])
		copy(ip[24:40], b[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip = make([]byte, 20+len(s.IPOpts))
		ip[0] = 0x40 | byte(len(ip)/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(tcp)))
		binary.BigEndian.PutUint16(ip[4:], s.IPID)
		frag := s.FragOff & 0x1fff
		if s.MF {
			frag |= 0x2000
		} else {
			frag |= 0x4000 // DF, as TCP sends
		}
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[8] = ttl
		ip[9] = 6
		a, b := s.Src.Addr().As4(), s.Dst.Addr().As4()
		copy(ip[12:16], a[:])
		copy(ip[16:20], b[:])
		copy(ip[20:], s.IPOpts)
	}
	frame := Cat(eth, ip, tcp, make([]byte, s.Pad))
	FixChecksums(frame)
	// Break the headers only now, as a buggy or hostile sender would.
	l4 := EthLen + len(ip)
	if s.Doff != 0 {
		frame[l4+12] = byte(s.Doff << 4)
	}
	if s.IPLenFix != 0 {
		at := EthLen + 2
		if v6 {
			at = EthLen + 4
		}
		binary.BigEndian.PutUint16(frame[at:], uint16(int(binary.BigEndian.Uint16(frame[at:]))+s.IPLenFix))
	}
	if s.Cut > 0 && s.Cut < len(frame) {
		frame = frame[:s.Cut]
	}
	return frame
}

// Info locates the headers of a well-formed frame.
type Info struct {
	V6       bool
	L4, End  int // TCP header offset; end of the IP packet
	HLen     int // TCP header length
	Src, Dst netip.AddrPort
}

// Parse locates the headers of a well-formed frame.
func Parse(f []byte) (Info, error) {
	var p Info
	if len(f) < EthLen+20 {
		return p, fmt.Errorf("frame of %d bytes", len(f))
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[EthLen]&0xf) * 4
		p.L4 = EthLen + ihl
		p.End = EthLen + int(binary.BigEndian.Uint16(f[EthLen+2:]))
		p.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[EthLen+12:EthLen+16])), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(f[EthLen+16:EthLen+20])), 0)
	case 0x86dd:
		p.V6 = true
		p.L4 = EthLen + 40
		p.End = p.L4 + int(binary.BigEndian.Uint16(f[EthLen+4:]))
		for nh := f[EthLen+6]; nh != 6; {
			if !isExt6(nh) || p.L4+8 > len(f) {
				return p, fmt.Errorf("IPv6 next header %d", nh)
			}
			nh, p.L4 = f[p.L4], p.L4+ext6Len(nh, f[p.L4:])
		}
		p.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[EthLen+8:EthLen+24])), 0)
		p.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(f[EthLen+24:EthLen+40])), 0)
	default:
		return p, fmt.Errorf("ethertype %#x", binary.BigEndian.Uint16(f[12:]))
	}
	if p.End > len(f) || p.L4+20 > p.End {
		return p, fmt.Errorf("IP length %d, frame %d", p.End, len(f))
	}
	p.HLen = int(f[p.L4+12]>>4) * 4
	if p.HLen < 20 || p.L4+p.HLen > p.End {
		return p, fmt.Errorf("TCP data offset %d", p.HLen)
	}
	p.Src = netip.AddrPortFrom(p.Src.Addr(), binary.BigEndian.Uint16(f[p.L4:]))
	p.Dst = netip.AddrPortFrom(p.Dst.Addr(), binary.BigEndian.Uint16(f[p.L4+2:]))
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

// TCPChecksum computes the TCP checksum of the frame from scratch, with
// the checksum field taken as zero.
func TCPChecksum(f []byte, p Info) uint16 {
	var sum uint32
	l := p.End - p.L4
	if p.V6 {
		sum = sum16(sum, f[EthLen+8:EthLen+40])
		sum += uint32(l>>16) + uint32(l&0xffff) + 6
	} else {
		sum = sum16(sum, f[EthLen+12:EthLen+20])
		sum += uint32(l) + 6
	}
	tcp := append([]byte(nil), f[p.L4:p.End]...)
	tcp[16], tcp[17] = 0, 0
	return fold(sum16(sum, tcp))
}

// IPv4Checksum computes the IPv4 header checksum of the frame from scratch.
func IPv4Checksum(f []byte) uint16 {
	ihl := int(f[EthLen]&0xf) * 4
	h := append([]byte(nil), f[EthLen:EthLen+ihl]...)
	h[10], h[11] = 0, 0
	return fold(sum16(0, h))
}

// FixChecksums recomputes every checksum of the frame, as a sender would.
func FixChecksums(f []byte) {
	p, err := Parse(f)
	if err != nil {
		panic(err)
	}
	if !p.V6 {
		binary.BigEndian.PutUint16(f[EthLen+10:], IPv4Checksum(f))
	}
	binary.BigEndian.PutUint16(f[p.L4+16:], TCPChecksum(f, p))
}

// CheckChecksums verifies every checksum of the frame by full recomputation.
func CheckChecksums(f []byte) error {
	p, err := Parse(f)
	if err != nil {
		return err
	}
	if !p.V6 {
		if got, want := binary.BigEndian.Uint16(f[EthLen+10:]), IPv4Checksum(f); got != want {
			return fmt.Errorf("IPv4 header checksum %#04x, recomputed %#04x", got, want)
		}
	}
	if got, want := binary.BigEndian.Uint16(f[p.L4+16:]), TCPChecksum(f, p); got != want {
		return fmt.Errorf("TCP checksum %#04x, recomputed %#04x", got, want)
	}
	return nil
}

// WithPort is ap with its port replaced.
func WithPort(ap netip.AddrPort, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr(), port)
}

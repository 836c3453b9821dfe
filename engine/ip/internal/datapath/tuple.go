// Tuple: a TCP 4-tuple as a packet reaching the forwarder carries it, and its key in the pair table.

package datapath

import (
	"fmt"
	"net/netip"
)

// Tuple is a TCP 4-tuple as a packet arriving at the forwarder carries it:
// Src is the remote end, Dst the forwarder's own address and port.
type Tuple struct {
	Src, Dst netip.AddrPort
}

// Reverse returns the tuple of packets travelling the other way.
func (t Tuple) Reverse() Tuple { return Tuple{Src: t.Dst, Dst: t.Src} }

func (t Tuple) String() string { return t.Src.String() + "->" + t.Dst.String() }

func (t Tuple) unmapped() Tuple {
	return Tuple{
		Src: netip.AddrPortFrom(t.Src.Addr().Unmap(), t.Src.Port()),
		Dst: netip.AddrPortFrom(t.Dst.Addr().Unmap(), t.Dst.Port()),
	}
}

// key encodes t for the flow map; IPv4-mapped IPv6 addresses count as IPv4,
// as they do on the wire.
func (t Tuple) key() (spliceSpliceKey, error) {
	t = t.unmapped()
	var k spliceSpliceKey
	s, d := t.Src.Addr(), t.Dst.Addr()
	switch {
	case !s.IsValid() || !d.IsValid():
		return k, fmt.Errorf("tuple %v: missing address", t)
	case s.Is4() && d.Is4():
		k.Family = afInet
		a, b := s.As4(), d.As4()
		copy(k.Saddr[:], a[:])
		copy(k.Daddr[:], b[:])
	case s.Is6() && d.Is6():
		k.Family = afInet6
		k.Saddr, k.Daddr = s.As16(), d.As16()
	default:
		return k, fmt.Errorf("tuple %v mixes IPv4 and IPv6", t)
	}
	if t.Src.Port() == 0 || t.Dst.Port() == 0 {
		return k, fmt.Errorf("tuple %v: port 0", t)
	}
	k.Sport, k.Dport = htons(t.Src.Port()), htons(t.Dst.Port())
	return k, nil
}

func tupleFromKey(k spliceSpliceKey) Tuple {
	var s, d netip.Addr
	if k.Family == afInet {
		s, d = netip.AddrFrom4([4]byte(k.Saddr[:4])), netip.AddrFrom4([4]byte(k.Daddr[:4]))
	} else {
		s, d = netip.AddrFrom16(k.Saddr), netip.AddrFrom16(k.Daddr)
	}
	return Tuple{Src: netip.AddrPortFrom(s, ntohs(k.Sport)), Dst: netip.AddrPortFrom(d, ntohs(k.Dport))}
}

// Port fields hold network byte order; the struct is read on little-endian hosts.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
func ntohs(v uint16) uint16 { return htons(v) }

// Which pairs the datapath can translate, and the PairSpec that splices two frozen connections.

package datapath

import (
	"errors"
	"fmt"

	"github.com/splicer/splicer/engine/ip/internal/tcprepair"
)

// CanTranslate reports whether the datapath can splice connections a
// (client side) and b (server side); a non-nil error says why not, for the
// control plane to fall back with that reason.
//
// Supported: the same address family on both; window scaling on either,
// both or none (windows are rescaled; a side without scaling caps the other
// at 65535 bytes); SACK on either (blocks toward a side that did not
// negotiate SACK are overwritten with NOPs). Not supported:
//   - timestamps on one connection only: one direction would need the
//     option inserted, and RFC 7323 section 3.2 lets a receiver that
//     negotiated timestamps drop segments without them (FreeBSD does);
//   - ECN on one connection only: ECE/CWR and ECT marks would reach a peer
//     that did not negotiate them;
//   - TCP-MD5/TCP-AO signatures, which cover the rewritten fields;
//   - MPTCP subflows, whose options carry their own sequence mappings;
//   - an MSS one side may use that the other side did not accept: the
//     datapath never changes a segment's size. The forwarder avoids it
//     toward the client by having the upstream SYN announce the client's
//     MSS (internal/sockopt); toward the server it cannot, once the
//     client's handshake is over.
func CanTranslate(a, b tcprepair.ConnParams) error {
	var errs []error
	fa, fb := family(a), family(b)
	switch {
	case fa == 0 || fb == 0:
		errs = append(errs, errors.New("a connection has no valid addresses"))
	case fa != fb:
		errs = append(errs, fmt.Errorf("address families differ (A %v, B %v): translating between IPv4 and IPv6 is not supported", a.Remote.Addr(), b.Remote.Addr()))
	}
	if a.Timestamps != b.Timestamps {
		errs = append(errs, fmt.Errorf("timestamps negotiated on %s only: the datapath can remove the option but not insert it", only(a.Timestamps)))
	}
	if a.ECN != b.ECN {
		errs = append(errs, fmt.Errorf("ECN negotiated on %s only", only(a.ECN)))
	}
	if a.Signed || b.Signed {
		errs = append(errs, errors.New("TCP-MD5/TCP-AO signatures cover the fields the datapath rewrites"))
	}
	if a.MPTCP || b.MPTCP {
		errs = append(errs, errors.New("MPTCP subflows are not translated"))
	}
	if a.WScale && (a.SndWScale > 14 || a.RcvWScale > 14) || b.WScale && (b.SndWScale > 14 || b.RcvWScale > 14) {
		errs = append(errs, errors.New("window scale above 14 (RFC 7323)"))
	}
	if a.AdvMSS != 0 && b.PeerMSS != 0 && a.AdvMSS > b.PeerMSS {
		errs = append(errs, fmt.Errorf("the client may send %d-byte segments, the server accepts %d", a.AdvMSS, b.PeerMSS))
	}
	if b.AdvMSS != 0 && a.PeerMSS != 0 && b.AdvMSS > a.PeerMSS {
		errs = append(errs, fmt.Errorf("the server may send %d-byte segments, the client accepts %d", b.AdvMSS, a.PeerMSS))
	}
	return errors.Join(errs...)
}

func family(c tcprepair.ConnParams) uint8 {
	l, r := c.Local.Addr().Unmap(), c.Remote.Addr().Unmap()
	switch {
	case l.Is4() && r.Is4():
		return afInet
	case l.Is6() && r.Is6():
		return afInet6
	}
	return 0
}

func only(onA bool) string {
	if onA {
		return "A (client side)"
	}
	return "B (server side)"
}

// NewPairSpec returns the spec that splices a (client side) and b (server
// side), both frozen, with both directions in engine.Forward:
//
//	Up.SeqOff   = b.WriteSeq - a.RcvNxt      Down.SeqOff = a.WriteSeq - b.RcvNxt
//	Up.TSOff    = b.TSVal - a.PeerTSVal      Down.TSOff  = a.TSVal - b.PeerTSVal
//
// The timestamp offsets make the first translated TSval at least the last
// one the forwarder's socket sent, so the receiver's PAWS check holds;
// echoes come back exact. The caller may set modes (engine.Hold while it
// works) before Insert.
func NewPairSpec(a, b tcprepair.ConnParams) (PairSpec, error) {
	if err := CanTranslate(a, b); err != nil {
		return PairSpec{}, fmt.Errorf("engine ip: %w", err)
	}
	spec := PairSpec{
		A:        Tuple{Src: a.Remote, Dst: a.Local},
		B:        Tuple{Src: b.Remote, Dst: b.Local},
		IfindexA: a.Ifindex,
		IfindexB: b.Ifindex,
		Up: DirSpec{
			SeqOff:    b.WriteSeq - a.RcvNxt,
			SndNxt:    a.RcvNxt,
			AckHi:     a.SndUna,
			StripSACK: a.SACK && !b.SACK,
		},
		Down: DirSpec{
			SeqOff:    a.WriteSeq - b.RcvNxt,
			SndNxt:    b.RcvNxt,
			AckHi:     b.SndUna,
			StripSACK: b.SACK && !a.SACK,
		},
	}
	if a.Timestamps {
		spec.Up.TSOff, spec.Up.TSLast = b.TSVal-a.PeerTSVal, a.PeerTSVal
		spec.Down.TSOff, spec.Down.TSLast = a.TSVal-b.PeerTSVal, b.PeerTSVal
	}
	if a.WScale {
		spec.Up.InShift, spec.Down.OutShift = a.SndWScale, a.RcvWScale
	}
	if b.WScale {
		spec.Down.InShift, spec.Up.OutShift = b.SndWScale, b.RcvWScale
	}
	return spec, nil
}

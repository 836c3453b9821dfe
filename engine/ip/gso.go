// Sending a run of owed bytes as one GSO packet: a packet socket with virtio-net headers, and the Ethernet addresses toward each peer.

package ip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A drained segment through the raw IP socket costs a sendto, and on veth
// the sending CPU also pays for the receiver taking it, its ACK and the
// datapath: one MSS at a time, the drain cost ip about 1.5 ms of CPU per
// 1 MiB response through http-reverse. A packet socket with
// PACKET_VNET_HDR takes one TCP segment of up to 64 KiB with a
// virtio_net_hdr saying how to cut it (gso_size = the receiver's MSS), as
// the kernel's own TCP hands its TSO/GSO super-segments to a device: veth
// passes it to the receiver whole, a NIC with TSO cuts it, any other
// device has the kernel cut it (software GSO), always after the sendto.
// The packet socket skips routing and the neighbour layer, so the engine
// writes the Ethernet header itself.

const (
	// vnetHdrLen is struct virtio_net_hdr, which precedes every packet
	// on a socket with PACKET_VNET_HDR.
	vnetHdrLen = 10
	ethHdrLen  = 14
	// linkTTL is how long a device's and a peer's Ethernet addresses are
	// used without asking the kernel again. A peer whose address changes
	// meanwhile loses the GSO packets sent to its old one: the drain
	// retransmits their bytes one segment at a time through the raw
	// socket, which the kernel routes.
	linkTTL = 10 * time.Second
	// gsoSndBuf is the packet socket's send buffer: a packet stays
	// charged to it until the receiver's TCP takes it (on veth, in the
	// same softirq), and a drain's first burst may be a few of them.
	gsoSndBuf = 4 << 20
)

// usableNeigh are the neighbour states whose link-layer address the
// kernel itself would send to.
const usableNeigh = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// linkPath is how GSO packets reach one peer: the device, the Ethernet
// header (destination, source, EtherType), and the largest packet the
// device takes whole.
type linkPath struct {
	ifindex  int
	eth      [ethHdrLen]byte
	maxFrame int // bytes from the Ethernet header on
	maxSegs  int
}

// maxPayload is the most payload one GSO packet to this path carries:
// whole segments of mss bytes, headers of hdrLen bytes (IP and TCP).
func (p *linkPath) maxPayload(hdrLen, mss int) int {
	segs := min((p.maxFrame-ethHdrLen-hdrLen)/mss, p.maxSegs)
	return max(segs, 0) * mss
}

type linkKey struct {
	ifindex int
	peer    netip.Addr
}

// linkEntry is a cached answer: nil path when GSO cannot reach the peer.
type linkEntry struct {
	path *linkPath
	at   time.Time
}

// gsoInjector sends GSO packets through a packet socket opened in the
// engine's home namespace.
type gsoInjector struct {
	home *homeNS
	log  *slog.Logger

	mu    sync.Mutex // guards fd, off and links
	fd    int        // -1 until opened
	off   bool       // the socket could not be opened, or the kernel refused a packet: raw path only
	links map[linkKey]linkEntry
}

func newGSOInjector(home *homeNS, log *slog.Logger) *gsoInjector {
	return &gsoInjector{home: home, log: log, fd: -1, links: make(map[linkKey]linkEntry)}
}

// path returns how to reach peer through device ifindex with GSO
// packets, or nil: the caller then sends through the raw IP socket.
func (g *gsoInjector) path(ifindex int, peer netip.Addr) *linkPath {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off || !g.openLocked() {
		return nil
	}
	key := linkKey{ifindex, peer}
	now := time.Now()
	if e, ok := g.links[key]; ok && now.Sub(e.at) < linkTTL {
		return e.path
	}
	p, err := g.resolve(ifindex, peer)
	if err != nil {
		g.log.Debug("owed bytes to this peer go one segment at a time", "peer", peer, "ifindex", ifindex, "err", err)
	}
	if len(g.links) >= maxRoutes {
		clear(g.links)
	}
	g.links[key] = linkEntry{p, now}
	return p
}

// openLocked opens the packet socket once; false if it cannot be (the
// failure is logged, and GSO stays off).
func (g *gsoInjector) openLocked() bool {
	if g.fd >= 0 {
		return true
	}
	err := g.home.do(func() error {
		// Protocol 0: the socket receives nothing.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			unix.Close(fd)
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, gsoSndBuf) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, gsoSndBuf)
		}
		g.fd = fd
		return nil
	})
	if err != nil {
		g.off = true
		g.log.Info("the drain sends one segment at a time: no packet socket for GSO", "err", err)
		return false
	}
	return true
}

// resolve asks the kernel for the device's and the next hop's Ethernet
// addresses toward peer: the route's gateway, or the peer itself when
// it is on-link.
func (g *gsoInjector) resolve(ifindex int, peer netip.Addr) (*linkPath, error) {
	h := g.home
	h.mu.Lock()
	defer h.mu.Unlock()
	l, err := h.nl.LinkByIndex(ifindex)
	if err != nil {
		return nil, err
	}
	a := l.Attrs()
	if a.EncapType != "ether" || len(a.HardwareAddr) != 6 {
		return nil, fmt.Errorf("device %s is %s, not Ethernet", a.Name, a.EncapType)
	}
	next, err := nextHop(h.nl, ifindex, peer)
	if err != nil {
		return nil, err
	}
	dst, err := neighbourMAC(h.nl, ifindex, next)
	if err != nil {
		return nil, err
	}
	p := &linkPath{ifindex: ifindex, maxFrame: 65535, maxSegs: 65535}
	if a.GSOMaxSize > 0 {
		// The stack cuts in software a packet as long as gso_max_size.
		p.maxFrame = min(p.maxFrame, int(a.GSOMaxSize)-1)
	}
	if a.GSOMaxSegs > 0 {
		p.maxSegs = min(p.maxSegs, int(a.GSOMaxSegs))
	}
	copy(p.eth[0:6], dst)
	copy(p.eth[6:12], a.HardwareAddr)
	ethType := uint16(unix.ETH_P_IP)
	if peer.Is6() {
		ethType = unix.ETH_P_IPV6
	}
	binary.BigEndian.PutUint16(p.eth[12:], ethType)
	return p, nil
}

// nextHop is the address whose link-layer address frames to peer carry.
func nextHop(nl *netlink.Handle, ifindex int, peer netip.Addr) (netip.Addr, error) {
	routes, err := nl.RouteGet(peer.AsSlice())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route to %v: %w", peer, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex != ifindex {
		return netip.Addr{}, fmt.Errorf("the route to %v no longer leaves through device %d", peer, ifindex)
	}
	if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		return gw.Unmap(), nil
	}
	return peer, nil
}

// neighbourMAC is next's Ethernet address in device ifindex's neighbour
// table. The forwarder's socket has just talked to the peer, so the entry
// is there unless it was flushed.
func neighbourMAC(nl *netlink.Handle, ifindex int, next netip.Addr) ([]byte, error) {
	family := netlink.FAMILY_V4
	if next.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := nl.NeighList(ifindex, family)
	if err != nil {
		return nil, fmt.Errorf("neighbours: %w", err)
	}
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if ok && ip.Unmap() == next && n.State&usableNeigh != 0 && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr, nil
		}
	}
	return nil, fmt.Errorf("no usable neighbour entry for %v", next)
}

// send hands one GSO packet (buildGSO) to the device of p. A refused
// packet (EINVAL and the like: a kernel that does not take these
// headers) turns GSO off for good; a full queue is a loss like any other.
func (g *gsoInjector) send(p *linkPath, pkt []byte) error {
	g.mu.Lock()
	fd := g.fd
	g.mu.Unlock()
	if fd < 0 {
		return errors.New("no packet socket")
	}
	proto := binary.BigEndian.Uint16(p.eth[12:])
	sa := &unix.SockaddrLinklayer{Ifindex: p.ifindex, Protocol: htons(proto)}
	err := unix.Sendto(fd, pkt, 0, sa)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EMSGSIZE) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) {
		g.mu.Lock()
		if !g.off {
			g.off = true
			g.log.Info("the drain sends one segment at a time: the kernel refused a GSO packet", "err", err)
		}
		g.mu.Unlock()
	}
	return err
}

func (g *gsoInjector) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	g.off = true
}

// htons is v in network byte order as the kernel reads a __be16 stored
// by the host (sockaddr_ll's protocol).
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// buildGSO writes into buf a virtio-net header, p's Ethernet header and
// an IPv4 or IPv6 packet carrying payload as one TCP segment, which the
// device or the kernel cuts into segments of mss bytes. The TCP checksum
// field holds the pseudo-header's sum over the whole packet's TCP length,
// not complemented, as CHECKSUM_PARTIAL wants: segmentation adjusts it
// for each segment's length, and the device or the kernel adds the
// segment's bytes.
func buildGSO(buf []byte, p *linkPath, src, dst netip.AddrPort, seq uint32, f segFields, payload []byte, mss int) []byte {
	copy(buf[vnetHdrLen:], p.eth[:])
	pkt, tcp := writeSegment(buf[vnetHdrLen+ethHdrLen:], src, dst, seq, f, payload)
	binary.BigEndian.PutUint16(tcp[16:], uint16(checksum(pseudoSum(src.Addr(), dst.Addr(), len(tcp)), nil)))
	ipLen := len(pkt) - len(tcp)
	tcpHdrLen := len(tcp) - len(payload)
	v := buf[:vnetHdrLen]
	v[0] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM
	v[1] = unix.VIRTIO_NET_HDR_GSO_TCPV4
	if !src.Addr().Is4() {
		v[1] = unix.VIRTIO_NET_HDR_GSO_TCPV6
	}
	// The kernel reads these in the host's order (legacy virtio).
	binary.NativeEndian.PutUint16(v[2:], uint16(ethHdrLen+ipLen+tcpHdrLen)) // hdr_len
	binary.NativeEndian.PutUint16(v[4:], uint16(mss))                       // gso_size
	binary.NativeEndian.PutUint16(v[6:], uint16(ethHdrLen+ipLen))           // csum_start
	binary.NativeEndian.PutUint16(v[8:], 16)                                // csum_offset: tcphdr.check
	return buf[:vnetHdrLen+ethHdrLen+len(pkt)]
}

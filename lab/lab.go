// Package lab builds the three-host test network that splicer's tests, demo
// and bench run on: a client, a forwarder and a server, each in its own
// network namespace, joined by two veth pairs.
//
//	client 10.99.1.2/24 fd99:1::2/64
//	   | veth-fwd                          client link
//	   | veth-client
//	forwarder 10.99.1.1/24 fd99:1::1/64, 10.99.2.1/24 fd99:2::1/64 (ip forwarding on)
//	   | veth-server
//	   | veth-fwd                          server link
//	server 10.99.2.2/24 fd99:2::2/64
//
// The client and server route everything through the forwarder, so a client
// that dials the server's address directly goes through kernel forwarding
// (the `route` baseline), while a proxy listens on the forwarder's addresses.
// IPv6 addresses skip duplicate address detection and are usable at once.
//
// A link can be made lossy (SetLoss, a tcx BPF program, since the kernel has
// no netem), slow (SetRate, a tbf qdisc) or narrower (SetMTU, both ends). Namespace names carry a prefix,
// the creating process's pid and a random suffix, so concurrent labs do not
// collide and Sweep can remove those left behind by a crashed run.
//
// In a test:
//
//	l := lab.NewT(t, lab.DefaultConfig())
//	ln, err := l.Server.Listen("tcp", "10.99.2.2:8080")
//	...
//	conn, err := l.Client.Dial(ctx, "tcp", "10.99.2.2:8080")
//
// From a command (demo, bench), call New and Close it, also on SIGINT:
//
//	l, err := lab.New(lab.DefaultConfig())
//	if err != nil { ... }
//	defer l.Close()
//
// Everything here needs root (CAP_SYS_ADMIN for namespaces, CAP_NET_ADMIN,
// CAP_BPF) and Linux 6.6 or later for SetLoss.
package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab/loss"
)

// DefaultPrefix starts the namespace names of labs whose Config has no Name.
const DefaultPrefix = "splab"

// Interface names, the same in every lab. Each is named after the host at the
// other end of its veth pair.
const (
	ClientIf    = "veth-fwd"    // in the client, toward the forwarder
	FwdClientIf = "veth-client" // in the forwarder, toward the client
	FwdServerIf = "veth-server" // in the forwarder, toward the server
	ServerIf    = "veth-fwd"    // in the server, toward the forwarder
)

// ErrClosed is returned by operations on a lab that has been closed.
var ErrClosed = errors.New("lab is closed")

// Config is the lab's addressing. A zero field takes its DefaultConfig value.
type Config struct {
	// Name prefixes the namespace names; a pid and random suffix are added.
	Name string

	// IPv4 addresses with their prefix length. Client and FwdClient share a
	// subnet, as do FwdServer and Server.
	Client, FwdClient, FwdServer, Server netip.Prefix

	// IPv6 addresses, laid out like the IPv4 ones.
	Client6, FwdClient6, FwdServer6, Server6 netip.Prefix
}

// DefaultConfig is the addressing the package doc shows.
func DefaultConfig() Config {
	return Config{
		Name:       DefaultPrefix,
		Client:     netip.MustParsePrefix("10.99.1.2/24"),
		FwdClient:  netip.MustParsePrefix("10.99.1.1/24"),
		FwdServer:  netip.MustParsePrefix("10.99.2.1/24"),
		Server:     netip.MustParsePrefix("10.99.2.2/24"),
		Client6:    netip.MustParsePrefix("fd99:1::2/64"),
		FwdClient6: netip.MustParsePrefix("fd99:1::1/64"),
		FwdServer6: netip.MustParsePrefix("fd99:2::1/64"),
		Server6:    netip.MustParsePrefix("fd99:2::2/64"),
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	fill := func(p *netip.Prefix, def netip.Prefix) {
		if !p.IsValid() {
			*p = def
		}
	}
	if c.Name == "" {
		c.Name = d.Name
	}
	fill(&c.Client, d.Client)
	fill(&c.FwdClient, d.FwdClient)
	fill(&c.FwdServer, d.FwdServer)
	fill(&c.Server, d.Server)
	fill(&c.Client6, d.Client6)
	fill(&c.FwdClient6, d.FwdClient6)
	fill(&c.FwdServer6, d.FwdServer6)
	fill(&c.Server6, d.Server6)
	return c
}

func (c Config) validate() error {
	if err := validPrefix(c.Name); err != nil {
		return err
	}
	pairs := []struct {
		name string
		a, b netip.Prefix
		v6   bool
	}{
		{"Client/FwdClient", c.Client, c.FwdClient, false},
		{"FwdServer/Server", c.FwdServer, c.Server, false},
		{"Client6/FwdClient6", c.Client6, c.FwdClient6, true},
		{"FwdServer6/Server6", c.FwdServer6, c.Server6, true},
	}
	for _, p := range pairs {
		if !sameFamily(p.a, p.v6) || !sameFamily(p.b, p.v6) {
			return fmt.Errorf("lab config %s: %v and %v are not both of the address family the field asks for", p.name, p.a, p.b)
		}
		if p.a.Masked() != p.b.Masked() || p.a.Addr() == p.b.Addr() {
			return fmt.Errorf("lab config %s: %v and %v must be distinct addresses in one subnet", p.name, p.a, p.b)
		}
	}
	if c.Client.Masked().Overlaps(c.Server.Masked()) || c.Client6.Masked().Overlaps(c.Server6.Masked()) {
		return errors.New("lab config: the client and server subnets overlap, so the forwarder could not route between them")
	}
	return nil
}

// sameFamily reports whether p is an IPv6 prefix if v6 and IPv4 if not; an
// IPv4-mapped IPv6 address is neither.
func sameFamily(p netip.Prefix, v6 bool) bool {
	a := p.Addr()
	return p.IsValid() && !a.Is4In6() && a.Is6() == v6
}

// validPrefix keeps prefixes usable as file names and parseable by Sweep.
func validPrefix(prefix string) error {
	if prefix == "" || len(prefix) > 64 || strings.ContainsAny(prefix, "/ \t\n") || prefix[0] == '.' {
		return fmt.Errorf("lab name prefix %q must be 1-64 characters, no slash, space or leading dot", prefix)
	}
	return nil
}

// Lab is a running three-namespace network. Close it to remove it.
type Lab struct {
	// Name is the common prefix of the three namespace names.
	Name string
	// Client, Fwd and Server are the three hosts.
	Client, Fwd, Server *NS
	// Cfg is the addressing in use, defaults filled in.
	Cfg Config

	// ctx ends when the lab closes, and with it every Command.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	losses map[End]*loss.Program
}

// New builds a lab. The caller must Close it, also when the process is
// interrupted, or the namespaces stay behind (Sweep removes them later).
func New(cfg Config) (*Lab, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Lab{
		Name:   fmt.Sprintf("%s-%d-%06x", cfg.Name, os.Getpid(), rand.Uint32()&0xffffff),
		Cfg:    cfg,
		losses: map[End]*loss.Program{},
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if err := l.build(); err != nil {
		return nil, errors.Join(fmt.Errorf("build lab %s: %w", l.Name, err), l.Close())
	}
	return l, nil
}

// NewT builds a lab for a test and closes it when the test ends. It skips the
// test without root (fails it under CI).
func NewT(tb testing.TB, cfg Config) *Lab {
	tb.Helper()
	testenv.RequireRoot(tb)
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("lab: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Errorf("close lab: %v", err)
		}
	})
	return l
}

// build creates the namespaces, then wires and addresses them. Close undoes
// whatever part of it succeeded.
func (l *Lab) build() error {
	if err := prepareNetnsDir(); err != nil {
		return err
	}
	var err error
	if l.Client, err = createNS(l, l.Name+"-client"); err != nil {
		return err
	}
	if l.Fwd, err = createNS(l, l.Name+"-fwd"); err != nil {
		return err
	}
	if l.Server, err = createNS(l, l.Name+"-server"); err != nil {
		return err
	}
	for _, n := range l.namespaces() {
		if err := prepareNS(n); err != nil {
			return err
		}
	}
	for _, kv := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.ipv6.conf.all.forwarding", "1"}} {
		if err := l.Fwd.Sysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := l.wire(); err != nil {
		return err
	}
	c := l.Cfg
	hosts := []struct {
		ns       *NS
		ifname   string
		addrs    []netip.Prefix
		gateways []netip.Addr // default routes; none in the forwarder
	}{
		{l.Client, ClientIf, []netip.Prefix{c.Client, c.Client6}, []netip.Addr{c.FwdClient.Addr(), c.FwdClient6.Addr()}},
		{l.Fwd, FwdClientIf, []netip.Prefix{c.FwdClient, c.FwdClient6}, nil},
		{l.Fwd, FwdServerIf, []netip.Prefix{c.FwdServer, c.FwdServer6}, nil},
		{l.Server, ServerIf, []netip.Prefix{c.Server, c.Server6}, []netip.Addr{c.FwdServer.Addr(), c.FwdServer6.Addr()}},
	}
	for _, h := range hosts {
		if err := configureLink(h.ns, h.ifname, h.addrs, h.gateways); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		if err := waitOperUp(h.ns, h.ifname); err != nil {
			return err
		}
	}
	return nil
}

// waitOperUp waits until the kernel reports ifname operationally up. A veth
// gets its carrier at once, but the kernel's link watcher marks it running,
// activates its queue and lets IPv6 use it only later: up to a second later,
// because it batches such events once per second across the whole machine.
// Until then the first packets (a SYN, a neighbour solicitation) vanish and
// the first connection pays a one-second retransmission.
func waitOperUp(n *NS, ifname string) error {
	h, err := n.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		link, err := h.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("%s: find %s: %w", n.Name, ifname, err)
		}
		if link.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s still %v after 5s", n.Name, ifname, link.Attrs().OperState)
		}
		// Polling: the alternative, a netlink subscription per namespace,
		// costs more code than the few milliseconds it would save.
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *Lab) namespaces() []*NS {
	var all []*NS
	for _, n := range []*NS{l.Client, l.Fwd, l.Server} {
		if n != nil {
			all = append(all, n)
		}
	}
	return all
}

// prepareNS sets what must hold before interfaces exist: no duplicate address
// detection (a tentative IPv6 address cannot be bound or routed for a second
// or so, which tests would otherwise have to wait out) and a live loopback.
func prepareNS(n *NS) error {
	for _, key := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"} {
		if err := n.Sysctl(key, "0"); err != nil {
			return err
		}
	}
	h, err := n.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("%s: find lo: %w", n.Name, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("%s: set lo up: %w", n.Name, err)
	}
	return nil
}

// wire creates both veth pairs from the forwarder, placing each peer straight
// into its namespace so that it never appears anywhere else.
func (l *Lab) wire() error {
	h, err := l.Fwd.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, pair := range []struct {
		local string
		peer  *NS
		name  string
	}{{FwdClientIf, l.Client, ClientIf}, {FwdServerIf, l.Server, ServerIf}} {
		if err := addVeth(h, pair.local, pair.peer, pair.name); err != nil {
			return err
		}
	}
	return nil
}

func addVeth(h *netlink.Handle, local string, peer *NS, peerName string) error {
	peerNS, err := peer.handle()
	if err != nil {
		return err
	}
	defer peerNS.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: local},
		PeerName:      peerName,
		PeerNamespace: netlink.NsFd(int(peerNS)),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s <-> %s:%s: %w", local, peer.Name, peerName, err)
	}
	return nil
}

// configureLink addresses ifname, sets it up and adds a default route via
// each of gateways.
func configureLink(n *NS, ifname string, addrs []netip.Prefix, gateways []netip.Addr) error {
	h, err := n.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", n.Name, ifname, err)
	}
	for _, p := range addrs {
		addr := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("%s: add %v to %s: %w", n.Name, p, ifname, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: set %s up: %w", n.Name, ifname, err)
	}
	for _, gw := range gateways {
		route := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       ipNet(netip.PrefixFrom(netip.IPv6Unspecified(), 0)),
			Gw:        gw.AsSlice(),
		}
		if gw.Is4() {
			route.Dst = ipNet(netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
		if err := h.RouteAdd(route); err != nil {
			return fmt.Errorf("%s: default route via %v: %w", n.Name, gw, err)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Close kills every process in the lab's namespaces, detaches its loss
// programs and deletes the namespaces, which takes the veths and any tc
// programs or qdiscs on them along. It is safe to call from another goroutine
// (a signal handler); calls after the first do nothing and return nil.
//
// Sockets that callers still hold keep their namespace alive, unnamed, until
// they are closed.
func (l *Lab) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.cancel()
	var errs []error
	for end, p := range l.losses {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("remove loss on %s:%s: %w", end.NS.Name, end.Interface, err))
		}
		delete(l.losses, end)
	}
	for _, n := range l.namespaces() {
		errs = append(errs, removeNS(n.Name))
	}
	return errors.Join(errs...)
}

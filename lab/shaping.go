// Impairing the lab's links: random loss through a tcx BPF program and rate limits through a tbf qdisc.

package lab

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/splicer/splicer/lab/loss"
)

// End is one end of a link: an interface in a namespace.
type End struct {
	NS        *NS
	Interface string
}

// Index is the interface index of the end inside its namespace.
func (e End) Index() (int, error) { return e.NS.LinkIndex(e.Interface) }

// Link is one veth pair of the lab.
type Link struct {
	// Name is "client" or "server", after the host the link reaches.
	Name string
	// ClientSide is the end nearer the client, ServerSide the other.
	ClientSide, ServerSide End
}

// ClientLink is the veth pair between the client and the forwarder.
func (l *Lab) ClientLink() Link {
	return Link{Name: "client", ClientSide: End{l.Client, ClientIf}, ServerSide: End{l.Fwd, FwdClientIf}}
}

// ServerLink is the veth pair between the forwarder and the server.
func (l *Lab) ServerLink() Link {
	return Link{Name: "server", ClientSide: End{l.Fwd, FwdServerIf}, ServerSide: End{l.Server, ServerIf}}
}

// Direction selects the packets on a link by where they travel.
type Direction int

const (
	// TowardServer is the traffic moving from the client's side to the server's.
	TowardServer Direction = 1 << iota
	// TowardClient is the traffic moving from the server's side to the client's.
	TowardClient
	// BothWays is all of a link's traffic.
	BothWays = TowardServer | TowardClient
)

// receivers are the ends whose ingress sees the packets travelling in d.
func (link Link) receivers(d Direction) []End {
	var ends []End
	if d&TowardServer != 0 {
		ends = append(ends, link.ServerSide)
	}
	if d&TowardClient != 0 {
		ends = append(ends, link.ClientSide)
	}
	return ends
}

func (l *Lab) owns(link Link) error {
	for _, e := range []End{link.ClientSide, link.ServerSide} {
		if e.NS == nil || e.NS.lab != l {
			return fmt.Errorf("link %q does not belong to lab %s", link.Name, l.Name)
		}
	}
	return nil
}

// SetLoss drops percent (0 to 100) of the packets travelling in dir on link,
// at random; 0 removes the loss program. Packets are dropped on arrival, at
// the receiving interface's tcx ingress and ahead of any program already
// there, so the sender learns of the loss only as a real network would tell
// it.
//
// A "packet" is what crosses the veth: with the kernel's default offloads a
// TCP sender hands over super-packets of up to 64 KiB, and one draw drops a
// whole one. Turn off TSO/GSO on the sending interface for wire-sized loss.
func (l *Lab) SetLoss(link Link, dir Direction, percent float64) error {
	if err := l.owns(link); err != nil {
		return err
	}
	ends := link.receivers(dir)
	if len(ends) == 0 {
		return fmt.Errorf("direction %d selects no traffic", dir)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for _, end := range ends {
		if err := l.setLossAt(end, percent); err != nil {
			return err
		}
	}
	return nil
}

// setLossAt changes, adds or removes the loss program at end's ingress.
// The caller holds l.mu.
func (l *Lab) setLossAt(end End, percent float64) error {
	p, attached := l.losses[end]
	switch {
	case percent == 0 && attached:
		delete(l.losses, end)
		return p.Close()
	case percent == 0:
		return nil
	case attached:
		return p.SetPercent(percent)
	}
	ifindex, err := end.Index()
	if err != nil {
		return err
	}
	p, err = loss.New(percent)
	if err != nil {
		return err
	}
	// The index means something only inside the end's namespace.
	if err := end.NS.Do(func() error { return p.Attach(ifindex, ebpf.AttachTCXIngress) }); err != nil {
		return errors.Join(err, p.Close())
	}
	l.losses[end] = p
	return nil
}

// LossStats counts the packets that the loss programs on link have passed and
// dropped in dir since SetLoss attached them. It fails when SetLoss has no
// program there.
func (l *Lab) LossStats(link Link, dir Direction) (loss.Stats, error) {
	if err := l.owns(link); err != nil {
		return loss.Stats{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var total loss.Stats
	found := false
	for _, end := range link.receivers(dir) {
		p, ok := l.losses[end]
		if !ok {
			continue
		}
		s, err := p.Stats()
		if err != nil {
			return loss.Stats{}, err
		}
		total.Passed += s.Passed
		total.Dropped += s.Dropped
		found = true
	}
	if !found {
		return loss.Stats{}, fmt.Errorf("no loss program on the %s link in direction %d", link.Name, dir)
	}
	return total, nil
}

// SetRate limits both directions of link to bitsPerSecond with a tbf qdisc at
// the root of each end; 0 removes the limit. The bucket holds 10 ms worth of
// bytes (at least 8 KiB) and the queue 50 ms, so a limited link adds up to
// 50 ms of queueing delay before it drops.
func (l *Lab) SetRate(link Link, bitsPerSecond uint64) error {
	if err := l.owns(link); err != nil {
		return err
	}
	if bitsPerSecond != 0 && bitsPerSecond < 8000 {
		return fmt.Errorf("rate %d bit/s is below the 8000 bit/s tbf can express here", bitsPerSecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for _, end := range []End{link.ClientSide, link.ServerSide} {
		if err := setRateAt(end, bitsPerSecond); err != nil {
			return err
		}
	}
	return nil
}

func setRateAt(end End, bitsPerSecond uint64) error {
	h, err := end.NS.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(end.Interface)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", end.NS.Name, end.Interface, err)
	}
	if bitsPerSecond == 0 {
		return removeRootTbf(h, link)
	}
	bytesPerSecond := bitsPerSecond / 8
	burst := max(bytesPerSecond/100, 8<<10)
	tbf := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: link.Attrs().Index,
			Handle:    netlink.MakeHandle(1, 0),
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   bytesPerSecond,
		Buffer: netlink.Xmittime(bytesPerSecond, uint32(burst)),
		Limit:  uint32(min(bytesPerSecond/20+burst, 1<<31)),
	}
	if err := h.QdiscReplace(tbf); err != nil {
		return fmt.Errorf("%s: tbf on %s: %w", end.NS.Name, end.Interface, err)
	}
	return nil
}

func removeRootTbf(h *netlink.Handle, link netlink.Link) error {
	qdiscs, err := h.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs on %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Type() == "tbf" {
			if err := h.QdiscDel(q); err != nil {
				return fmt.Errorf("remove tbf from %s: %w", link.Attrs().Name, err)
			}
		}
	}
	return nil
}

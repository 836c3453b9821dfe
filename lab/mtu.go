// Link MTUs: a link smaller than the other makes the two sides of the forwarder announce different MSSes.

package lab

import "fmt"

// SetMTU sets the MTU of both ends of link, as a path through a smaller
// link would have it: each host's routes over the link, and so the MSS
// its TCP announces there, follow the new MTU. Connections opened before
// keep the MSS they negotiated.
func (l *Lab) SetMTU(link Link, mtu int) error {
	if err := l.owns(link); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	for _, end := range []End{link.ClientSide, link.ServerSide} {
		if err := end.setMTU(mtu); err != nil {
			return err
		}
	}
	return nil
}

// MTU is the MTU of end's interface.
func (e End) MTU() (int, error) {
	h, err := e.NS.Netlink()
	if err != nil {
		return 0, err
	}
	defer h.Close()
	link, err := h.LinkByName(e.Interface)
	if err != nil {
		return 0, fmt.Errorf("%s: find %s: %w", e.NS.Name, e.Interface, err)
	}
	return link.Attrs().MTU, nil
}

func (e End) setMTU(mtu int) error {
	h, err := e.NS.Netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(e.Interface)
	if err != nil {
		return fmt.Errorf("%s: find %s: %w", e.NS.Name, e.Interface, err)
	}
	if err := h.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("%s: set MTU %d on %s: %w", e.NS.Name, mtu, e.Interface, err)
	}
	return nil
}

// Package reuseport hands a listener's new connections to its workers' sockets with an sk_reuseport BPF program, in turn or by client address, rather than by the kernel's hash of their addresses and ports.
//
// The workers of a master (splicer run with workers) each accept on a
// socket of their own bound to the listener's address with SO_REUSEPORT.
// By default the kernel picks the socket for a new connection by a hash of
// its addresses and ports, so a few long keep-alive connections (a load
// generator's 16, a front load balancer's pool) may land 10 and 6, and one
// worker carries more than its share for as long as they last.
//
// The program here spreads a group in one of two modes:
//
//   - InTurn takes each worker in turn, so 16 connections arrive 8 and 8.
//   - ByClient sends every connection from one client address (IPv4 or
//     IPv6 source address, not the port) to the same worker: the worker is
//     a hash of the address modulo the number of workers. A per-client
//     limit held by each worker on its own (max_connections_per_client) is
//     exact only if one worker sees all of a client's connections; in turn
//     or by the kernel's hash, a client could open up to the limit at every
//     worker. The cost: one busy client address, or many clients behind one
//     NAT address, all land on one worker.
//
// A program cannot refuse a connection: where it has no socket to pick (or,
// by client, no address to read), the kernel's hash picks as it would
// without it.
//
// It needs CAP_BPF (or root); without it the kernel's hash spreads the
// connections, as for any SO_REUSEPORT group.
package reuseport

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// Mode is how a group's new connections are spread over its sockets.
type Mode int

const (
	// InTurn: connection k goes to socket k % workers.
	InTurn Mode = iota
	// ByClient: every connection from one source address goes to socket
	// hash(address) % workers.
	ByClient
)

func (m Mode) String() string {
	switch m {
	case InTurn:
		return "in turn"
	case ByClient:
		return "by client"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// byClient is the value of the program's by_client map (at key 0) for m.
func (m Mode) byClient() (uint32, error) {
	switch m {
	case InTurn:
		return 0, nil
	case ByClient:
		return 1, nil
	}
	return 0, fmt.Errorf("unknown spread mode %v", m)
}

// Group is the program attached to one listener's reuseport group. It is
// kept to change the mode later (SetMode), and can be handed to another
// process (File, FromFile). The methods of a nil *Group do nothing, so a
// caller may keep nil where Spread failed.
type Group struct {
	objs   *spreadObjects // nil for a group taken over by FromFile
	mode   *ebpf.Map      // the program's by_client map
	closed bool
}

// Spread attaches the program to the reuseport group of sockets, one per
// worker, all listening on the same address, spreading new connections by
// mode. The attached program lives as long as the sockets do; the Group only
// holds handles to change its mode, which Close releases.
func Spread(sockets []*os.File, mode Mode) (*Group, error) {
	if len(sockets) == 0 {
		return nil, errors.New("no sockets")
	}
	byClient, err := mode.byClient()
	if err != nil {
		return nil, err
	}
	g := &Group{objs: &spreadObjects{}}
	if err := loadSpreadObjects(g.objs, nil); err != nil {
		return nil, fmt.Errorf("load sk_reuseport program: %w", err)
	}
	g.mode = g.objs.ByClient
	if err := g.attach(sockets, byClient); err != nil {
		g.objs.Close()
		return nil, err
	}
	return g, nil
}

// FromFile takes over a group another process attached, by the file
// File gave it (passed across an execve, say): its mode can be changed
// again. f stays the caller's to close.
func FromFile(f *os.File) (*Group, error) {
	var fd int
	err := sockopt.WithFD(f, func(raw int) (err error) {
		fd, err = unix.FcntlInt(uintptr(raw), unix.F_DUPFD_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if m.Type() != ebpf.Array || m.ValueSize() != 4 || m.MaxEntries() != 1 {
		m.Close()
		return nil, fmt.Errorf("not a spread group's mode: a %v map of %d-byte values", m.Type(), m.ValueSize())
	}
	return &Group{mode: m}, nil
}

// File is a handle to the group's mode for FromFile: a duplicate the
// caller closes (close-on-exec: clear it to pass it across an execve).
func (g *Group) File() (*os.File, error) {
	if g == nil || g.closed {
		return nil, errors.New("no spread group")
	}
	fd, err := unix.FcntlInt(uintptr(g.mode.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "spread-mode"), nil
}

// attach fills the program's map and variables and attaches it to the group.
func (g *Group) attach(sockets []*os.File, byClient uint32) error {
	for i, f := range sockets {
		err := sockopt.WithFD(f, func(fd int) error { return g.objs.Sockets.Update(uint32(i), uint64(fd), 0) })
		if err != nil {
			return fmt.Errorf("socket %d into the map: %w", i, err)
		}
	}
	if err := g.setByClient(byClient); err != nil {
		return err
	}
	if err := g.objs.Workers.Set(uint32(len(sockets))); err != nil {
		return err
	}
	err := sockopt.WithFD(sockets[0], func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, g.objs.Spread.FD())
	})
	if err != nil {
		return fmt.Errorf("attach sk_reuseport program (SO_ATTACH_REUSEPORT_EBPF): %w", err)
	}
	return nil
}

// SetMode changes how the group's next connections are spread; those
// already accepted stay where they are. It fails after Close.
func (g *Group) SetMode(mode Mode) error {
	if g == nil {
		return nil
	}
	byClient, err := mode.byClient()
	if err != nil {
		return err
	}
	if g.closed {
		return errors.New("spread group closed")
	}
	return g.setByClient(byClient)
}

func (g *Group) setByClient(v uint32) error { return g.mode.Update(uint32(0), v, ebpf.UpdateAny) }

// Close releases the Go side's handles to the program and its map; the
// program stays attached and keeps spreading, in the last mode set, for as
// long as the sockets live.
func (g *Group) Close() error {
	if g == nil || g.closed {
		return nil
	}
	g.closed = true
	if g.objs != nil {
		return g.objs.Close()
	}
	return g.mode.Close()
}

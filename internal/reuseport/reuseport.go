// Package reuseport hands a listener's new connections to its workers' sockets in turn, with an sk_reuseport BPF program, rather than by the kernel's hash of their addresses.
//
// The workers of a master (splicer run with workers) each accept on a
// socket of their own bound to the listener's address with SO_REUSEPORT.
// By default the kernel picks the socket for a new connection by a hash of
// its addresses and ports, so a few long keep-alive connections (a load
// generator's 16, a front load balancer's pool) may land 10 and 6, and one
// worker carries more than its share for as long as they last. The program
// here takes each worker in turn, so connections arrive 8 and 8. A program
// cannot refuse a connection: where it has no socket to pick, the kernel's
// hash picks as it would without it.
//
// It needs CAP_BPF (or root); without it the kernel's hash spreads the
// connections, as for any SO_REUSEPORT group.
package reuseport

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// Spread attaches the program to the reuseport group of sockets, one per
// worker, all listening on the same address: connection k goes to
// sockets[k % len]. The program and its map live as long as the group;
// nothing is left to close.
func Spread(sockets []*os.File) error {
	if len(sockets) == 0 {
		return errors.New("no sockets")
	}
	var objs spreadObjects
	if err := loadSpreadObjects(&objs, nil); err != nil {
		return fmt.Errorf("load sk_reuseport program: %w", err)
	}
	defer objs.Close() // the group keeps the program, the program its map
	for i, f := range sockets {
		err := sockopt.WithFD(f, func(fd int) error { return objs.Sockets.Update(uint32(i), uint64(fd), 0) })
		if err != nil {
			return fmt.Errorf("socket %d into the map: %w", i, err)
		}
	}
	if err := objs.Workers.Set(uint32(len(sockets))); err != nil {
		return err
	}
	err := sockopt.WithFD(sockets[0], func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, objs.Spread.FD())
	})
	if err != nil {
		return fmt.Errorf("attach sk_reuseport program (SO_ATTACH_REUSEPORT_EBPF): %w", err)
	}
	return nil
}

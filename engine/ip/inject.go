// The injector: raw sockets in the engine's home namespace that send the drain's retransmissions and the segments kept while a pair changes hands.

package ip

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// injector sends raw TCP segments from the engine's home namespace.
type injector struct {
	mu       sync.Mutex // guards fd4 and fd6
	fd4, fd6 int        // -1 until opened
	// gso sends the drains' new runs of owed bytes as GSO packets; nil
	// until the engine is loaded (useHome).
	gso atomic.Pointer[gsoInjector]
	// drainPackets counts the packets that carried owed bytes for the
	// first time (a GSO packet once), drainGSO the GSO packets among
	// them, drainResent the segments retransmitted: Counters.
	drainPackets, drainGSO, drainResent atomic.Int64
}

func newInjector() *injector { return &injector{fd4: -1, fd6: -1} }

// open opens the raw socket of dst's family (IPPROTO_RAW: the caller
// writes the IP header, and the socket receives nothing); do runs a
// function in the home namespace.
func (in *injector) open(v6 bool, do func(func() error) error) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	fd := &in.fd4
	af := unix.AF_INET
	if v6 {
		fd, af = &in.fd6, unix.AF_INET6
	}
	if *fd >= 0 {
		return *fd, nil
	}
	var nfd int
	err := do(func() error {
		var err error
		nfd, err = unix.Socket(af, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("raw socket: %w", err)
	}
	*fd = nfd
	return nfd, nil
}

// useHome lets the drains send GSO packets in the engine's home
// namespace h.
func (in *injector) useHome(h *homeNS, log *slog.Logger) {
	in.gso.Store(newGSOInjector(h, log))
}

func (in *injector) close() {
	if g := in.gso.Load(); g != nil {
		g.close()
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, fd := range []*int{&in.fd4, &in.fd6} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// send hands one IP packet to the raw socket. Errors (a full device
// queue) are losses like any other: the drain retransmits.
func (in *injector) send(fd int, dst netip.Addr, pkt []byte) error {
	if dst.Is4() {
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()})
	}
	return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet6{Addr: dst.As16()})
}

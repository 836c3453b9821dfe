// Which path a TLS listener's bytes take on this host: crypto/tls in user space, and whether kernel TLS (kTLS) could take over.

package httprev

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/sockopt"
)

// TLSPath says how a listener terminating TLS moves its client's bytes on
// this host, for `splicer check`. The records are always opened and sealed
// in user space (crypto/tls), so bodies are copied, never spliced: kernel
// TLS would let an engine splice into the socket, but is not used until it
// can be tested, and the line says whether this kernel has it at all.
func TLSPath() string {
	const userSpace = "terminated in user space (crypto/tls); bodies copied, never spliced"
	if err := probeKTLS(); err != nil {
		return userSpace + "; kTLS unavailable (" + err.Error() + ")"
	}
	return userSpace + "; kTLS available in this kernel but not used yet"
}

// probeKTLS asks the kernel for the "tls" upper layer protocol on a
// connected loopback socket, as kTLS starts (TCP_ULP): nil when it takes
// it.
func probeKTLS() error {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		return err
	}
	defer c.Close()
	if peer, err := ln.Accept(); err == nil {
		defer peer.Close()
	}
	err = sockopt.WithFD(c, func(fd int) error {
		return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_ULP, "tls")
	})
	if errors.Is(err, unix.ENOENT) {
		return errors.New("kernel lacks CONFIG_TLS")
	}
	return err
}

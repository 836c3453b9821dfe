// Hosts the harness runs things on: the lab's namespaces as root, or plain loopback without privileges.

package bench

import (
	"context"
	"net"
	"os/exec"

	"github.com/splicer/splicer/lab"
)

// host is where a part of the experiment runs: a lab namespace or this host.
type host interface {
	Listen(network, addr string) (net.Listener, error)
	Dialer() func(ctx context.Context, network, addr string) (net.Conn, error)
	Command(ctx context.Context, name string, args ...string) *exec.Cmd
}

var _ host = (*lab.NS)(nil)

// local is this host's own network namespace, for the unprivileged demo.
type local struct{}

func (local) Listen(network, addr string) (net.Listener, error) { return net.Listen(network, addr) }

func (local) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext
}

func (local) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}

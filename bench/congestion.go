// The TCP congestion control the lab's namespaces use, named in every experiment's notes: it changes the forwarders' order (docs/benchmarks.md, "Congestion control").

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/splicer/splicer/lab"
)

// ipv4Sysctls is where net.ipv4.* of the reading process's network
// namespace are; ccPath is the default congestion control there: what
// new sockets get. A namespace takes the host's when it is made.
const (
	ipv4Sysctls = "/proc/sys/net/ipv4/"
	ccPath      = ipv4Sysctls + "tcp_congestion_control"
)

// setCC makes cc the default congestion control of every namespace of l,
// before anything in them opens a socket. A namespace other than the
// host's may only choose what the host's
// net.ipv4.tcp_allowed_congestion_control lists, so the error says how to
// allow it.
func setCC(l *lab.Lab, cc string) error {
	for _, n := range []*lab.NS{l.Client, l.Fwd, l.Server} {
		err := n.Do(func() error { return os.WriteFile(ccPath, []byte(cc), 0) })
		switch {
		case errors.Is(err, os.ErrPermission):
			allowed := hostSysctl("tcp_allowed_congestion_control")
			return fmt.Errorf("--cc %s: a network namespace may only use what the host allows (net.ipv4.tcp_allowed_congestion_control: %s); allow it with sysctl -w net.ipv4.tcp_allowed_congestion_control=\"%s %s\", or make it the host's default", cc, allowed, allowed, cc)
		case err != nil:
			return fmt.Errorf("--cc %s in namespace %s: %w (available: %s)", cc, n.Name, err, hostSysctl("tcp_available_congestion_control"))
		}
	}
	return nil
}

// hostSysctl reads net.ipv4.NAME in this process's namespace, or says it
// could not.
func hostSysctl(name string) string {
	b, err := os.ReadFile(ipv4Sysctls + name)
	if err != nil {
		return "unreadable"
	}
	return strings.TrimSpace(string(b))
}

// readCC reads the default congestion control of the forwarder's and the
// server's hosts; "" where it could not be read.
func (e *Env) readCC(ctx context.Context) (fwd, server string) {
	read := func(h host) string {
		out, err := h.Command(ctx, "cat", ccPath).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	return read(e.fwd), read(e.server)
}

// ccNote says which congestion control the run's TCP connections used,
// and whether --cc chose it, or "" if neither is known. The forwarder's decides how a forwarder that
// terminates TCP (copy, pipe, sockmap, HAProxy, nginx) sends to the
// client; the server's how the origin sends, also to the client once ip
// has spliced.
func ccNote(fwd, server string, chosen bool) string {
	why := "the lab's namespaces take the host's net.ipv4.tcp_congestion_control when they are made, --cc chooses another"
	if chosen {
		why = "chosen with --cc"
	}
	why += "; it changes the forwarders' order, docs/benchmarks.md \"Congestion control\""
	switch {
	case fwd == "" && server == "":
		return ""
	case fwd == server:
		return fmt.Sprintf("TCP congestion control: %s (%s)", fwd, why)
	}
	return fmt.Sprintf("TCP congestion control: %s in the forwarder's namespace, %s in the server's (%s)", orUnknown(fwd), orUnknown(server), why)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

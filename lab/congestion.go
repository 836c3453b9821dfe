// The TCP congestion control of the lab's namespaces: each takes the host's default when it is made, SetCC chooses another.

package lab

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ipv4Sysctls is where net.ipv4.* of the reading process's network
// namespace are; CCPath is the default congestion control there: what
// new sockets get.
const (
	ipv4Sysctls = "/proc/sys/net/ipv4/"
	CCPath      = ipv4Sysctls + "tcp_congestion_control"
)

// SetCC makes cc the default congestion control of every namespace of l,
// for the sockets made from then on (an accepted socket takes its
// listener's). A namespace other than the host's may only choose what the
// host's net.ipv4.tcp_allowed_congestion_control lists, so the error says
// how to allow it; it does not name cc, which the caller does.
func (l *Lab) SetCC(cc string) error {
	for _, n := range []*NS{l.Client, l.Fwd, l.Server} {
		err := n.Do(func() error { return os.WriteFile(CCPath, []byte(cc), 0) })
		switch {
		case errors.Is(err, os.ErrPermission):
			allowed := HostSysctl("tcp_allowed_congestion_control")
			return fmt.Errorf("a network namespace may only use what the host allows (net.ipv4.tcp_allowed_congestion_control: %s); allow it with sysctl -w net.ipv4.tcp_allowed_congestion_control=\"%s %s\", or make it the host's default", allowed, allowed, cc)
		case err != nil:
			return fmt.Errorf("namespace %s: %w (available: %s)", n.Name, err, HostSysctl("tcp_available_congestion_control"))
		}
	}
	return nil
}

// HostSysctl reads net.ipv4.NAME in this process's namespace, or says it
// could not.
func HostSysctl(name string) string {
	b, err := os.ReadFile(ipv4Sysctls + name)
	if err != nil {
		return "unreadable"
	}
	return strings.TrimSpace(string(b))
}

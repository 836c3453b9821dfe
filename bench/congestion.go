// The TCP congestion control the lab's namespaces use, named in every experiment's notes: it changes the forwarders' order (docs/benchmarks.md, "Congestion control").

package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/splicer/splicer/lab"
)

// readCC reads the default congestion control of the forwarder's and the
// server's hosts; "" where it could not be read.
func (e *Env) readCC(ctx context.Context) (fwd, server string) {
	read := func(h host) string {
		out, err := h.Command(ctx, "cat", lab.CCPath).Output()
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

// Tests of the congestion-control note every experiment carries.

package bench

import (
	"strings"
	"testing"
)

func TestCCNote(t *testing.T) {
	if n := ccNote("", "", false); n != "" {
		t.Errorf("nothing known: note %q, want none", n)
	}
	if n := ccNote("bbr", "bbr", false); !strings.HasPrefix(n, "TCP congestion control: bbr (") {
		t.Errorf("both bbr: note %q", n)
	}
	n := ccNote("cubic", "", false)
	if !strings.Contains(n, "cubic in the forwarder's namespace, unknown in the server's") {
		t.Errorf("server unknown: note %q", n)
	}
	if !strings.Contains(n, "net.ipv4.tcp_congestion_control") {
		t.Errorf("note %q does not say where the setting comes from", n)
	}
	if n := ccNote("cubic", "cubic", true); !strings.HasPrefix(n, "TCP congestion control: cubic (chosen with --cc;") {
		t.Errorf("chosen: note %q", n)
	}
}

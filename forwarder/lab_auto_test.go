// Lab test of the default engine choice: auto splices a plain tcp listener's pair with ip.

package forwarder_test

import (
	"context"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestLabAutoPicksIP: a tcp listener with engine auto (the default) in the
// lab, where ip can run: /flows shows the pair spliced by ip, 16 MiB each
// way arrive intact, the pair ends at EOF, and the datapath held back no
// segment it could not keep (hold_dropped 0).
func TestLabAutoPicksIP(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	serveOrigin(t, l, origin.Stream, serverAddr(l, 9811))
	lc := tcpListener("auto", fwdAddr(l, 7811), serverAddr(l, 9811))
	if lc.Engine != "auto" {
		t.Fatalf("a listener's default engine is %q, want auto", lc.Engine)
	}
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, ip.Name)

	client := dialClient(t, l, lf.Addr("auto").String())
	lf.waitFlow(t, "auto", "spliced by ip", func(f forwarder.Flow) bool {
		return f.State == "spliced" && f.Engine == ip.Name
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size = 16 << 20
	if rep, err := origin.StreamCheck(ctx, client, size, size); err != nil || !rep.OK() {
		t.Fatalf("16 MiB each way: %+v, %v", rep, err)
	}
	lf.waitClosed(t, "auto", "eof", 1)
	if n := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "eof"); n != 1 {
		t.Errorf("ip splices that ended at EOF: %v, want 1", n)
	}
	for _, drop := range []string{"hold", "hold_dropped"} {
		if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", drop); n != 0 {
			t.Errorf("the datapath dropped %v segments as %s", n, drop)
		}
	}
}

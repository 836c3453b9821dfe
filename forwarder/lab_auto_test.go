// Lab tests of the default engine choice: auto carries a tcp listener's short pairs on copy and promotes the long ones to ip.

package forwarder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// TestLabAutoPromotesToIP: a tcp listener with engine auto (the default)
// in the lab, where ip can run. Short exchanges (4 KiB each way, closed
// at once) are carried by copy to the end, and ip never splices one: no
// ip splice, no promotion. A long transfer through the same listener is
// promoted to ip: /flows shows it spliced by ip with the promotion noted,
// 64 MiB each way arrive intact (pattern checked), the pair ends at EOF,
// splicer_promotions_total{to="ip"} counts it, and the datapath held back
// no segment it could not keep (hold_dropped 0).
func TestLabAutoPromotesToIP(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Stream, httplab.ServerAddr(l, 9811))
	lc := tcpListener("auto", httplab.FwdAddr(l, 7811), httplab.ServerAddr(l, 9811))
	if lc.Engine != "auto" {
		t.Fatalf("a listener's default engine is %q, want auto", lc.Engine)
	}
	// The time threshold out of reach of a slow host: the short pairs
	// must stay on copy however long they take.
	lc.Promote = config.Promote{AfterBytes: config.DefaultPromote.AfterBytes, After: config.Duration(time.Minute)}
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, ip.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const short, mice = 4 << 10, 3
	for range mice {
		client := httplab.Dial(t, l, lf.Addr("auto").String())
		if rep, err := origin.StreamCheck(ctx, client, short, short); err != nil || !rep.OK() {
			t.Fatalf("4 KiB each way: %+v, %v", rep, err)
		}
		client.Close()
	}
	lf.waitClosed(t, "auto", "eof", mice)
	if n := lf.Metric("splicer_splice_transitions_total", "engine", copyengine.Name, "outcome", "eof"); n != mice {
		t.Errorf("copy splices that ended at EOF: %v, want %d", n, mice)
	}
	if n := forwarder.CounterSum(lf.Forwarder, "splicer_splice_transitions_total", "engine", ip.Name); n != 0 {
		t.Errorf("ip splices of short pairs: %v, want none", n)
	}
	if n := forwarder.CounterSum(lf.Forwarder, "splicer_promotions_total", "listener", "auto"); n != 0 {
		t.Errorf("promotions of short pairs: %v, want none", n)
	}

	const size = 64 << 20
	client := httplab.Dial(t, l, lf.Addr("auto").String())
	checked := make(chan error, 1)
	go func() {
		rep, err := origin.StreamCheck(ctx, client, size, size)
		if err == nil && !rep.OK() {
			t.Errorf("64 MiB each way: %+v", rep)
		}
		checked <- err
	}()
	fl := lf.waitFlow(t, "auto", "spliced by ip", func(f forwarder.Flow) bool {
		return f.State == "spliced" && f.Engine == ip.Name
	})
	if !strings.HasPrefix(fl.Note, "promoted from copy") {
		t.Errorf("/flows notes %q for the promoted pair, want why it was promoted", fl.Note)
	}
	if err := <-checked; err != nil {
		t.Fatalf("64 MiB each way: %v", err)
	}
	lf.waitClosed(t, "auto", "eof", mice+1)
	if n := lf.Metric("splicer_promotions_total", "listener", "auto", "to", ip.Name); n != 1 {
		t.Errorf("promotions to ip: %v, want 1", n)
	}
	if n := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "eof"); n != 1 {
		t.Errorf("ip splices that ended at EOF: %v, want 1", n)
	}
	for _, drop := range []string{"hold", "hold_dropped"} {
		if n := lf.Metric("splicer_engine_events_total", "engine", ip.Name, "event", drop); n != 0 {
			t.Errorf("the datapath dropped %v segments as %s", n, drop)
		}
	}
}

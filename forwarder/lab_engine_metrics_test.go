// The engines' own counters reach /metrics: a sockmap splice shows up in its event and byte counters.

package forwarder_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

func TestLabEngineCountersExported(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	httplab.ServeProto(t, l, origin.Echo, httplab.ServerAddr(l, 9701))
	lc := tcpListener("sm", httplab.FwdAddr(l, 7701), httplab.ServerAddr(l, 9701))
	lc.Engine = "sockmap"
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, "sockmap")

	c := httplab.Dial(t, l, lf.Addr("sm").String())
	msg := bytes.Repeat([]byte("sockmap"), 10000)
	writeAsync(t, c, msg, true)
	if got := readAll(t, c); !bytes.Equal(got, msg) {
		t.Fatalf("echo through sockmap: %d bytes back, want %d", len(got), len(msg))
	}
	if v := lf.Metric("splicer_engine_events_total", "engine", "sockmap", "event", "splices"); v < 1 {
		t.Fatalf("splicer_engine_events_total{engine=sockmap,event=splices} = %v, want >= 1", v)
	}
	// The engine totals its counters when the splice ends, which may be
	// just after the client has read the last byte. Which share the kernel
	// moved depends on timing (bytes queued before the socket entered the
	// map are moved in user space), so the check is on the sum.
	want := float64(2 * len(msg))
	moved := func() float64 {
		return lf.Metric("splicer_engine_bytes_total", "engine", "sockmap", "kind", "kernel") +
			lf.Metric("splicer_engine_bytes_total", "engine", "sockmap", "kind", "user")
	}
	testenv.EventuallyShowing(t, "sockmap's kernel + user bytes to count both directions", func() bool {
		return moved() >= want
	}, func() string { return fmt.Sprintf("counted %v bytes, want %v", moved(), want) })
}

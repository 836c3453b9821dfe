// The engines' own counters reach /metrics: a sockmap splice shows up as kernel redirects.

package forwarder_test

import (
	"bytes"
	"testing"

	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

func TestLabEngineCountersExported(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	serveOrigin(t, l, origin.Echo, serverAddr(l, 9701))
	lc := tcpListener("sm", fwdAddr(l, 7701), serverAddr(l, 9701))
	lc.Engine = "sockmap"
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, "sockmap")

	c := dialClient(t, l, lf.Addr("sm").String())
	msg := bytes.Repeat([]byte("sockmap"), 10000)
	writeAsync(t, c, msg, true)
	if got := readAll(t, c); !bytes.Equal(got, msg) {
		t.Fatalf("echo through sockmap: %d bytes back, want %d", len(got), len(msg))
	}
	if v := lf.metric("splicer_engine_events_total", "engine", "sockmap", "event", "splices"); v < 1 {
		t.Fatalf("splicer_engine_events_total{engine=sockmap,event=splices} = %v, want >= 1", v)
	}
	if v := lf.metric("splicer_engine_events_total", "engine", "sockmap", "event", "kernel_bytes"); v <= 0 {
		t.Fatalf("splicer_engine_events_total{engine=sockmap,event=kernel_bytes} = %v, want > 0: the kernel moved no byte", v)
	}
}

// Lab test of pairs engine ip follows on its own (engine.Options.OnEnd): no goroutine per spliced pair, and /flows, metrics and logs as before.

package forwarder_test

import (
	"io"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

	"github.com/splicer/splicer/engine/ip"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestLabDetachedPairs: 40 pairs of a tcp listener on ip, spliced until
// they close, cost the process no goroutine each once spliced; /flows
// lists them spliced by ip with the bytes moved since (echoed by hand
// through the datapath); each ends at EOF, counted as a splice that ended
// at eof and a pair closed at eof, and logged closed with its client,
// upstream, reason and engine; the spliced gauge goes back to 0.
func TestLabDetachedPairs(t *testing.T) {
	const n = 40
	l := lab.NewT(t, lab.DefaultConfig())
	servers := serverConns(t, l, httplab.ServerAddr(l, 9841))
	lf := startLabForwarder(t, l, tcpListener("det", httplab.FwdAddr(l, 7841), httplab.ServerAddr(l, 9841)))
	lf.requireEngine(t, ip.Name)

	// One pair first: what the engine starts once (its tickers, the
	// datapath's readers) is not per pair.
	c0 := httplab.Dial(t, l, lf.Addr("det").String())
	s0 := accept(t, servers)
	lf.waitFlow(t, "det", "the first pair spliced by ip", func(f forwarder.Flow) bool { return f.State == "spliced" && f.Engine == ip.Name })
	g0 := runtime.NumGoroutine()

	var clients, srvs []*net.TCPConn
	for range n {
		clients = append(clients, httplab.Dial(t, l, lf.Addr("det").String()))
		srvs = append(srvs, accept(t, servers))
	}
	testenv.EventuallyShowing(t, "every pair spliced by ip", func() bool {
		flows, err := lf.flows()
		if err != nil || len(flows) != n+1 {
			return false
		}
		for _, f := range flows {
			if f.State != "spliced" || f.Engine != ip.Name {
				return false
			}
		}
		return true
	}, func() string { flows, _ := lf.flows(); return flowsString(flows) })
	if g := runtime.NumGoroutine(); g-g0 >= n/4 {
		t.Errorf("%d goroutines more for %d spliced pairs", g-g0, n)
	}
	for i := range n {
		exchangeBothWays(t, clients[i], srvs[i], 1000+i)
	}
	testenv.EventuallyShowing(t, "/flows counting the bytes", func() bool {
		flows, err := lf.flows()
		if err != nil {
			return false
		}
		moved := 0
		for _, f := range flows {
			if f.BytesUp >= 1000 && f.BytesDown >= 1000 {
				moved++
			}
		}
		return moved == n
	}, func() string { flows, _ := lf.flows(); return flowsString(flows) })

	for i := range n {
		clients[i].CloseWrite()
		if _, err := io.ReadAll(srvs[i]); err != nil {
			t.Fatal(err)
		}
		srvs[i].Close()
		readAll(t, clients[i])
	}
	c0.Close()
	s0.Close()
	lf.waitClosed(t, "det", "eof", n+1)
	if got := lf.Metric("splicer_splice_transitions_total", "engine", ip.Name, "outcome", "eof"); got < n {
		t.Errorf("ip splices that ended at eof: %v, want at least %d", got, n)
	}
	testenv.EventuallyShowing(t, "the spliced gauge back to 0", func() bool {
		return lf.Metric("splicer_pairs_spliced", "engine", ip.Name) == 0
	}, func() string {
		return strconv.FormatFloat(lf.Metric("splicer_pairs_spliced", "engine", ip.Name), 'f', 0, 64)
	})
	for _, c := range clients {
		if lf.Logs.Line("pair closed", "client="+c.LocalAddr().String(), "upstream="+httplab.ServerAddr(l, 9841), "reason=eof", "engine=ip") == "" {
			t.Errorf("no pair closed line for the client %v, with its upstream, reason and engine", c.LocalAddr())
		}
	}
}

// TestLabLeastConnCountsDetachedPairs: a tcp listener on ip with balance
// least_conn in front of two servers. A pair spliced until it closes
// outlives its proxy's Serve (the engine follows it), and still counts
// for its server: the second client goes to the other server, and once
// both pairs end, the next client goes to the first again.
func TestLabLeastConnCountsDetachedPairs(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	first, second := serverConns(t, l, httplab.ServerAddr(l, 9851)), serverConns(t, l, httplab.ServerAddr(l, 9852))
	lc := tcpListener("lc", httplab.FwdAddr(l, 7851), httplab.ServerAddr(l, 9851))
	lc.Upstream, lc.Balance = config.Servers(httplab.ServerAddr(l, 9851), httplab.ServerAddr(l, 9852)), "least_conn"
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, ip.Name)

	a := httplab.Dial(t, l, lf.Addr("lc").String())
	sa := accept(t, first)
	lf.waitFlow(t, "lc", "the first pair spliced by ip", func(f forwarder.Flow) bool { return f.State == "spliced" && f.Engine == ip.Name })
	b := httplab.Dial(t, l, lf.Addr("lc").String())
	var sb *net.TCPConn
	select {
	case sb = <-second:
	case sb = <-first:
		t.Fatal("the second client went to the first server, which holds a pair spliced by ip")
	case <-time.After(10 * time.Second):
		t.Fatal("the second client reached no server")
	}
	for _, p := range [][2]*net.TCPConn{{a, sa}, {b, sb}} {
		p[0].Close()
		p[1].Close()
	}
	testenv.EventuallyShowing(t, "both pairs closed", func() bool { fl, err := lf.flows(); return err == nil && len(fl) == 0 }, func() string { fl, _ := lf.flows(); return flowsString(fl) })
	httplab.Dial(t, l, lf.Addr("lc").String())
	accept(t, first)
}

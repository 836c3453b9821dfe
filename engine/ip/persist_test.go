// Pinned pairs outliving their engine: an engine that keeps its pairs leaves them pinned at Close, the next engine with the same pin directory adopts, follows, counts and lists them, and unpins everything once they are over.

package ip

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

// TestEngineAdoptsKeptPairs: an engine told to keep its pairs (the old
// process of an upgrade) leaves a spliced pair pinned when its splice is
// cancelled and it closes; the program keeps forwarding it; a new engine
// with the same pin directory adopts it at Probe, lists it, carries 16 MiB
// each way of the stream protocol through it to EOF, counts it, sweeps it
// after TIME_WAIT and unpins the datapath, which detaches the program. A
// third engine, never spliced, pins nothing.
func TestEngineAdoptsKeptPairs(t *testing.T) {
	const size = 16 << 20
	pinDir := filepath.Join(testenv.MountBPFFS(t), "splicer", "test")
	opts := Options{MaxPairs: 16, TimeWait: time.Second, PinDir: pinDir}
	el := newEngineLab(t, opts)
	lp := el.pair(t, origin.Stream)
	ctx, cancel := context.WithCancel(context.Background())
	done := el.splice(t, ctx, lp, engine.Both(0))
	gens, _ := os.ReadDir(pinDir)
	if len(gens) != 1 {
		t.Fatalf("pin directory holds %d entries after the first splice, want this engine's", len(gens))
	}
	el.e.LeavePairs()
	cancel()
	if res := result(t, done, engine.EndCancel); res.Err != nil {
		t.Fatalf("cancelled splice: %+v", res)
	}
	if err := el.e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := el.l.FwdIngressProgramsT(t); n != 2 {
		t.Fatalf("%d programs attached after the keeping engine closed, want its 2", n)
	}

	next := New(opts, testenv.Logger(t))
	t.Cleanup(func() { next.Close() })
	if err := el.l.Fwd.Do(next.Probe); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	adopted := next.Adopted()
	if len(adopted) != 1 || adopted[0].Client.String() != lp.client.LocalAddr().String() || adopted[0].State != engine.StateSpliced {
		t.Fatalf("adopted %+v, want the client %v spliced", adopted, lp.client.LocalAddr())
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	rep, err := origin.StreamCheck(cctx, lp.client, size, size)
	if err != nil || !rep.OK() {
		t.Fatalf("%d bytes each way through the adopted pair: %+v, %v", size, rep, err)
	}
	testenv.Eventually(t, "the adopted pair to end", func() bool { return len(next.Adopted()) == 0 })
	if c := next.Counters(); c["adopted_pairs"] != 1 || c["forwarded"] == 0 {
		t.Errorf("counters %v, want adopted_pairs 1 and packets forwarded", c)
	}
	testenv.Eventually(t, "the adopted datapath unpinned after TIME_WAIT", func() bool {
		_, err := os.Stat(pinDir)
		return os.IsNotExist(err) && el.l.FwdIngressProgramsT(t) == 0
	})

	// An engine that splices nothing pins nothing.
	third := New(opts, testenv.Logger(t))
	if err := el.l.Fwd.Do(third.Probe); err != nil {
		t.Fatal(err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pinDir); !os.IsNotExist(err) {
		t.Errorf("an engine that spliced nothing left %s: %v", pinDir, err)
	}
}

// TestEngineAdoptionResetsGiveBackSplices: a splice that would give the
// pair back in control mode (the client watched, the server limited)
// cannot be continued once its process is gone, whose frozen sockets it
// needs: the adopting engine resets both peers, counts it, and unpins the
// table it leaves empty.
func TestEngineAdoptionResetsGiveBackSplices(t *testing.T) {
	pinDir := filepath.Join(testenv.MountBPFFS(t), "splicer", "test")
	opts := Options{MaxPairs: 16, PinDir: pinDir}
	el := newEngineLab(t, opts)
	el.upstreamRcvBuf = limitedRcvBuf
	lp := el.pair(t, "")
	done := el.splice(t, context.Background(), lp, engine.Options{
		Up: engine.DirOptions{Mode: engine.Watch}, Down: engine.DirOptions{Mode: engine.Forward, Limit: 1 << 20}})
	// As SIGKILL would: the descriptors go, the pins stay, and nothing
	// removes the pair.
	if err := el.e.dp.Leave(); err != nil {
		t.Fatal(err)
	}
	<-done
	el.e.Close()

	next := New(opts, testenv.Logger(t))
	t.Cleanup(func() { next.Close() })
	if err := el.l.Fwd.Do(next.Probe); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if n := len(next.Adopted()); n != 0 {
		t.Errorf("%d adopted pairs followed, want none", n)
	}
	if c := next.Counters(); c["adopted_reset"] != 1 || c["adopted_pairs"] != 0 {
		t.Errorf("counters adopted_reset %d, adopted_pairs %d; want 1 and 0", c["adopted_reset"], c["adopted_pairs"])
	}
	for _, c := range []*net.TCPConn{lp.client, lp.server} {
		c.SetReadDeadline(time.Now().Add(waitFor))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%v reads %v, want a reset", c.LocalAddr(), err)
		}
	}
	testenv.Eventually(t, "the emptied table unpinned", func() bool {
		_, err := os.Stat(pinDir)
		return os.IsNotExist(err) && el.l.FwdIngressProgramsT(t) == 0
	})
}

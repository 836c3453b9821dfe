// Lab test of every engine under loss with the splice falling anywhere in both streams: random chunks and pauses each way, each side half-closing when done, every byte and both EOFs delivered.

package forwarder_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/proxy/httpcore/httprand"
)

// randomPairs is how many pairs each engine carries at once: 6, or
// SPLICER_RANDOM_SEEDS when that asks for more (a longer campaign).
func randomPairs() int { return max(6, httprand.Seeds()) }

// TestLabRandomStreams: for every engine, randomPairs() pairs through a tcp
// listener that splices 30 ms after accepting, across links losing 2% of
// segments both ways. Each side writes a random number of chunks (1 byte
// to 256 KiB) with random pauses (up to 20 ms), so the splice falls
// anywhere in either stream, then half-closes; the other side may still
// be writing. Each side reads exactly what the other wrote, then EOF,
// every pair closes as eof, and the engine spliced some of them (ip
// declines a pair already half-closed, to pipe: TCP_REPAIR rebuilds no
// half-closed socket).
func TestLabRandomStreams(t *testing.T) {
	for _, name := range all.Names() {
		t.Run(name, func(t *testing.T) {
			l := lab.NewT(t, lab.DefaultConfig())
			for _, link := range []lab.Link{l.ClientLink(), l.ServerLink()} {
				if err := l.SetLoss(link, lab.BothWays, 2); err != nil {
					t.Fatal(err)
				}
			}
			up := serverConns(t, l, serverAddr(l, 9701))
			lc := tcpListener("random", fwdAddr(l, 7701), serverAddr(l, 9701))
			lc.Engine = name
			lc.SpliceAfter = config.Duration(30 * time.Millisecond)
			lf := startLabForwarder(t, l, lc)
			lf.requireEngine(t, name)
			var wg sync.WaitGroup
			pairs := randomPairs()
			for seed := range uint64(pairs) {
				client := dialClient(t, l, lf.Addr("random").String())
				server := accept(t, up)
				wg.Go(func() { exchangeRandomStreams(t, client, server, seed) })
			}
			wg.Wait()
			lf.waitClosed(t, "random", "eof", float64(pairs))
			spliced := lf.Metric("splicer_splice_transitions_total", "engine", name, "outcome", "eof")
			if spliced == 0 {
				t.Errorf("engine %s spliced none of the %d pairs", name, pairs)
			}
			t.Logf("%v of %d pairs spliced by %s", spliced, pairs, name)
		})
	}
}

// exchangeRandomStreams has client and server write random streams drawn
// from seed at each other at once and checks what each one read.
func exchangeRandomStreams(t *testing.T, client, server *net.TCPConn, seed uint64) {
	deadline := time.Now().Add(90 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	var wg sync.WaitGroup
	var up, down []byte // what the client and the server wrote
	var upErr, downErr error
	wg.Go(func() { up, upErr = writeRandomStream(client, rand.New(rand.NewPCG(seed, 1))) })
	wg.Go(func() { down, downErr = writeRandomStream(server, rand.New(rand.NewPCG(seed, 2))) })
	var gotUp, gotDown []byte
	var readUpErr, readDownErr error
	wg.Go(func() { gotUp, readUpErr = io.ReadAll(server) })
	wg.Go(func() { gotDown, readDownErr = io.ReadAll(client) })
	wg.Wait()
	for _, err := range []error{upErr, downErr, readUpErr, readDownErr} {
		if err != nil {
			t.Errorf("pair %d: %v", seed, err)
			return
		}
	}
	check := func(dir string, got, want []byte) {
		if !bytes.Equal(got, want) {
			t.Errorf("pair %d, %s: read %d bytes (sha256 %x), want the %d written (%x)", seed, dir, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
		}
	}
	check("client to server", gotUp, up)
	check("server to client", gotDown, down)
}

// writeRandomStream writes up to 24 chunks of random bytes and sizes to
// c with random pauses between them, then half-closes c, and returns what
// it wrote.
func writeRandomStream(c *net.TCPConn, r *rand.Rand) ([]byte, error) {
	var sent []byte
	for range r.IntN(25) {
		chunk := enginetest.Random(1+r.IntN(256<<10), r.Uint64())
		if _, err := c.Write(chunk); err != nil {
			return sent, err
		}
		sent = append(sent, chunk...)
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
	return sent, c.CloseWrite()
}

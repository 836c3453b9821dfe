// Lab tests of every engine and listener kind under loss with the splice falling anywhere in both streams: random chunks and pauses each way, each side half-closing (every byte and both EOFs delivered) or one side resetting (each side got a prefix of the other's bytes, then the reset).

package forwarder_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"

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
// listener that splices 30 ms after accepting, and as many through a
// socks5 listener, through http-forward's CONNECT and through
// http-reverse's protocol switch (Upgrade; each splices once the answer is
// out), across links losing 2% of segments both ways. Each side writes a
// random number of chunks (1 byte to 256 KiB) with random pauses (up to
// 20 ms), so the splice falls anywhere in either stream, then
// half-closes; the other side may still be writing. Each side reads
// exactly what the other wrote, then EOF, every pair closes as eof, and
// the engine spliced some of them (ip declines a pair already
// half-closed, to pipe: TCP_REPAIR rebuilds no half-closed socket).
func TestLabRandomStreams(t *testing.T) {
	forEachKindAndEngine(t, func(t *testing.T, kind randomKind, name string) {
		lf, pairs := runRandomPairs(t, kind, name, 2, exchangeRandomStreams)
		lf.waitClosed(t, "random", "eof", float64(pairs))
		spliced := lf.Metric("splicer_splice_transitions_total", "engine", name, "outcome", "eof")
		if spliced == 0 {
			t.Errorf("engine %s spliced none of the %d pairs", name, pairs)
		}
		t.Logf("%v of %d pairs spliced by %s", spliced, pairs, name)
	})
}

// forEachKindAndEngine runs test in a subtest for every listener kind of
// randomKinds with every engine.
func forEachKindAndEngine(t *testing.T, test func(t *testing.T, kind randomKind, name string)) {
	for _, kind := range randomKinds {
		for _, name := range all.Names() {
			t.Run(kind.prefix+name, func(t *testing.T) { test(t, kind, name) })
		}
	}
}

// randomKind is a way pairs reach the server in the random tests: the
// listener it runs, how a client asks it for the server, and what the
// server answers first (nil: nothing).
type randomKind struct {
	prefix   string // of the subtests' names
	listener func(l *lab.Lab) config.Listener
	connect  func(c *net.TCPConn, server string) error
	serve    func(c *net.TCPConn) error
}

var randomKinds = []randomKind{
	{prefix: "", listener: func(l *lab.Lab) config.Listener {
		lc := tcpListener("random", httplab.FwdAddr(l, 7701), httplab.ServerAddr(l, 9701))
		lc.SpliceAfter = config.Duration(30 * time.Millisecond)
		return lc
	}, connect: func(*net.TCPConn, string) error { return nil }},
	{prefix: "socks5-", listener: func(l *lab.Lab) config.Listener {
		lc := randomListener(l, "socks5")
		lc.SOCKS5 = &config.SOCKS5{Auth: "none"}
		lc.Destinations = &config.Destinations{Allow: []string{l.Cfg.Server.Addr().String()}}
		return lc
	}, connect: socksConnect},
	{prefix: "connect-", listener: func(l *lab.Lab) config.Listener {
		lc := randomListener(l, "http-forward")
		lc.HTTP = &config.HTTP{ConnectPorts: []int{9701}}
		lc.Destinations = &config.Destinations{Allow: []string{l.Cfg.Server.Addr().String()}}
		return lc
	}, connect: httpConnect},
	{prefix: "upgrade-", listener: func(l *lab.Lab) config.Listener {
		lc := randomListener(l, "http-reverse")
		lc.Routes = []config.Route{{Pool: "s"}}
		lc.Pools = []config.Pool{{Name: "s", Servers: config.Servers(httplab.ServerAddr(l, 9701))}}
		return lc
	}, connect: httpUpgrade, serve: switchProtocols},
}

// open has a client connect through lf's listener "random", of this kind,
// to the server's port 9701, whose accepted connections come on up, and
// returns the two ends once the listener has connected them.
func (kind randomKind) open(tb testing.TB, l *lab.Lab, lf *labForwarder, up <-chan *net.TCPConn) (client, server *net.TCPConn) {
	tb.Helper()
	client = httplab.Dial(tb, l, lf.Addr("random").String())
	connected := make(chan error, 1)
	go func() { connected <- kind.connect(client, httplab.ServerAddr(l, 9701)) }()
	server = accept(tb, up)
	if kind.serve != nil {
		if err := kind.serve(server); err != nil {
			tb.Fatal(err)
		}
	}
	if err := <-connected; err != nil {
		tb.Fatal(err)
	}
	return client, server
}

// randomListener is the random tests' listener "random" of kind proxy on
// the forwarder's port 7701, with every default.
func randomListener(l *lab.Lab, proxy string) config.Listener {
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Proxy = "random", httplab.FwdAddr(l, 7701), proxy
	return lc
}

// socksConnect asks the socks5 listener on c to connect to server, greeting
// and request in one write as clients that need no authentication may,
// and reads both replies.
func socksConnect(c *net.TCPConn, server string) error {
	ap := netip.MustParseAddrPort(server)
	ip := ap.Addr().As4()
	req := []byte{5, 1, 0, 5, 1, 0, 1, ip[0], ip[1], ip[2], ip[3], byte(ap.Port() >> 8), byte(ap.Port())}
	c.SetDeadline(time.Now().Add(waitFor))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(req); err != nil {
		return err
	}
	var reply [2 + 10]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fmt.Errorf("socks5 replies: %w", err)
	}
	if reply[1] != 0 || reply[3] != 0 {
		return fmt.Errorf("socks5 replies % x: method %d, reply code %d, want 0 and 0", reply, reply[1], reply[3])
	}
	return nil
}

// httpConnect asks the http-forward listener on c for a tunnel to server
// (CONNECT) and reads the answer's head.
func httpConnect(c *net.TCPConn, server string) error {
	return askHTTP(c, "CONNECT "+server+" HTTP/1.1\r\nHost: "+server+"\r\n\r\n", "HTTP/1.1 200")
}

// httpUpgrade asks the http-reverse listener on c to switch to a protocol
// of the test's own (Upgrade) and reads the answer's head.
func httpUpgrade(c *net.TCPConn, _ string) error {
	return askHTTP(c, "GET /stream HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: random-stream\r\n\r\n", "HTTP/1.1 101")
}

// switchProtocols is the server's side of httpUpgrade: it reads the
// request's head and switches.
func switchProtocols(c *net.TCPConn) error {
	c.SetDeadline(time.Now().Add(waitFor))
	defer c.SetDeadline(time.Time{})
	head, err := readHead(c)
	if err != nil {
		return fmt.Errorf("upgrade request after %q: %w", head, err)
	}
	_, err = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: random-stream\r\n\r\n")
	return err
}

// askHTTP writes req on c and reads the answer's head, which must start
// with want.
func askHTTP(c *net.TCPConn, req, want string) error {
	c.SetDeadline(time.Now().Add(waitFor))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	head, err := readHead(c)
	if err != nil {
		return fmt.Errorf("answer after %q: %w", head, err)
	}
	if !bytes.HasPrefix(head, []byte(want)) {
		return fmt.Errorf("answered %q, want %s", head, want)
	}
	return nil
}

// readHead reads an HTTP head from c byte by byte, so as to take none of
// the bytes after it.
func readHead(c *net.TCPConn) ([]byte, error) {
	var head []byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return head, err
		}
		head = append(head, b[0])
	}
	return head, nil
}

// runRandomPairs starts a lab losing lossPercent of segments both ways on
// both links and a forwarder with engine name and kind's listener
// "random", and runs exchange on randomPairs() pairs at once, each with
// its seed.
func runRandomPairs(t *testing.T, kind randomKind, name string, lossPercent float64, exchange func(t *testing.T, client, server *net.TCPConn, seed uint64)) (*labForwarder, int) {
	t.Helper()
	l := lab.NewT(t, lab.DefaultConfig())
	for _, link := range []lab.Link{l.ClientLink(), l.ServerLink()} {
		if err := l.SetLoss(link, lab.BothWays, lossPercent); err != nil {
			t.Fatal(err)
		}
	}
	up := serverConns(t, l, httplab.ServerAddr(l, 9701))
	lc := kind.listener(l)
	lc.Engine = name
	lf := startLabForwarder(t, l, lc)
	lf.requireEngine(t, name)
	var wg sync.WaitGroup
	pairs := randomPairs()
	for seed := range uint64(pairs) {
		client, server := kind.open(t, l, lf, up)
		wg.Go(func() { exchange(t, client, server, seed) })
	}
	wg.Wait()
	return lf, pairs
}

// TestLabRandomResets: for every engine and listener kind, randomPairs()
// pairs as in TestLabRandomStreams (1% loss), but one side of each pair,
// drawn from the seed, resets the connection after a random number of its
// chunks instead of half-closing. As over a direct connection, each side
// has read a prefix of what the other wrote, the side still open learns
// of the reset (never a clean end, never a hang), the forwarder
// counts every pair closed by reset, and the engine spliced some of them:
// else the resets met the proxy's control mode, not the engine.
func TestLabRandomResets(t *testing.T) {
	forEachKindAndEngine(t, func(t *testing.T, kind randomKind, name string) {
		lf, pairs := runRandomPairs(t, kind, name, 1, exchangeResettingStreams)
		lf.waitClosed(t, "random", "reset", float64(pairs))
		spliced := lf.splices(name)
		if spliced == 0 {
			t.Errorf("engine %s spliced none of the %d pairs", name, pairs)
		}
		t.Logf("%v of %d pairs spliced by %s", spliced, pairs, name)
	})
}

// splices is how many splices engine name carried, however they ended:
// splicer_splice_transitions_total of the engine but for the pairs it
// declined (fallback) or failed to splice (error).
func (lf *labForwarder) splices(name string) float64 {
	declined := lf.Metric("splicer_splice_transitions_total", "engine", name, "outcome", "fallback") +
		lf.Metric("splicer_splice_transitions_total", "engine", name, "outcome", "error")
	return forwarder.CounterSum(lf.Forwarder, "splicer_splice_transitions_total", "engine", name) - declined
}

// exchangeResettingStreams has the two sides of a pair write random
// streams drawn from seed, and one of them reset after a random number of
// chunks; the other, in one pair of two, only reads. It checks what each
// one read and how the other learnt of the reset.
func exchangeResettingStreams(t *testing.T, client, server *net.TCPConn, seed uint64) {
	deadline := time.Now().Add(90 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	r := rand.New(rand.NewPCG(seed, 3))
	resetter, other, who := client, server, "client"
	if r.IntN(2) == 1 {
		resetter, other, who = server, client, "server"
	}
	chunks, otherWrites := r.IntN(12), r.IntN(2) == 0
	if seed == 0 {
		// The first pair resets late, well past the listener's splice, so
		// that every run has a reset the engine meets, not control mode.
		chunks = 12 + r.IntN(4)
	}
	// A reset lost on the way (1% loss) reaches a side that only reads, as
	// over a direct connection, as the answer to its next segment: a
	// keepalive after a second of quiet instead of Go's 15 s.
	other.SetKeepAlivePeriod(time.Second)
	var wg sync.WaitGroup
	var fromResetter, fromOther, atResetter, atOther []byte
	var readErr, writeErr error
	wg.Go(func() {
		fromResetter, _ = writeChunks(resetter, rand.New(rand.NewPCG(seed, 4)), chunks)
		resetter.SetLinger(0)
		resetter.Close()
	})
	wg.Go(func() { atResetter, _ = io.ReadAll(resetter) }) // ends with the Close
	if otherWrites {
		wg.Go(func() { fromOther, writeErr = writeRandomStream(other, rand.New(rand.NewPCG(seed, 5))) })
	}
	wg.Go(func() { atOther, readErr = io.ReadAll(other) })
	wg.Wait()
	// The kernel reports a reset to one call: the other side's read, or
	// its write if that came first, after which the read finds a plain
	// end. A side that only reads must see the reset itself: a clean end
	// there is a FIN the forwarder made up.
	if !errors.Is(readErr, syscall.ECONNRESET) && !(readErr == nil && errors.Is(writeErr, syscall.ECONNRESET)) {
		t.Errorf("pair %d (the %s reset after %d chunks; the other side writing: %v): the other side's read ended with %v after %d bytes, its write with %v; want ECONNRESET from one of them",
			seed, who, chunks, otherWrites, readErr, len(atOther), writeErr)
	}
	checkPrefix(t, seed, "at the resetter", atResetter, fromOther)
	checkPrefix(t, seed, "at the other side", atOther, fromResetter)
}

// checkPrefix fails unless got is the start of sent: a reset may cut a
// stream short, never change or reorder it.
func checkPrefix(t *testing.T, seed uint64, where string, got, sent []byte) {
	t.Helper()
	if len(got) > len(sent) || !bytes.Equal(got, sent[:len(got)]) {
		t.Errorf("pair %d, %s: read %d bytes (sha256 %x), not a prefix of the %d written", seed, where, len(got), sha256.Sum256(got), len(sent))
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
	sent, err := writeChunks(c, r, r.IntN(25))
	if err != nil {
		return sent, err
	}
	return sent, c.CloseWrite()
}

// writeChunks writes n chunks of random bytes and sizes (1 byte to 256 KiB)
// to c with random pauses (up to 20 ms) after each, and returns what it
// wrote, a failed chunk included: its start may have gone.
func writeChunks(c *net.TCPConn, r *rand.Rand, n int) ([]byte, error) {
	var sent []byte
	for range n {
		chunk := enginetest.Random(1+r.IntN(256<<10), r.Uint64())
		sent = append(sent, chunk...)
		if _, err := c.Write(chunk); err != nil {
			return sent, err
		}
		time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
	}
	return sent, nil
}

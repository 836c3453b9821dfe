// Random keep-alive exchanges through http-reverse on every in-process engine: every status, header and body byte arrives as the back-end sent it, across the sizes where the way a body moves changes.

package all_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
)

// randomSizes cross every bound where http-reverse moves a body another
// way: within the head reader (16 KiB), copied through the body buffer,
// with splice(2) past 64 KiB, through the engine from 512 KiB
// (httpcore.ReverseCopyBelow).
var randomSizes = []int{0, 1, 100, 4 << 10, 16<<10 - 1, 16<<10 + 1, 64 << 10, 64<<10 + 1, 200 << 10,
	512<<10 - 1, 512<<10 + 3, 1<<20 + 17, 3 << 20}

// randomExchange is one request and what the back-end is asked to answer.
type randomExchange struct {
	method       string
	reqBody      int    // request body length (POST)
	reqChunked   bool   // the request body chunked, else with a length
	size         int    // response body length
	framing      string // cl, chunked or close (no length, ends at close)
	status       int
	seed         uint64 // of the response body's bytes
	writePieces  int    // the request written in this many parts
	pipelineNext bool   // the next request sent before this answer is read
	// origin is the back-end as http-forward's clients name it in the
	// request line (absolute form); empty for the origin form.
	origin string
}

func newRandomExchange(r *rand.Rand) randomExchange {
	x := randomExchange{method: http.MethodGet, status: http.StatusOK, seed: r.Uint64(),
		size: randomSizes[r.IntN(len(randomSizes))], writePieces: 1 + r.IntN(3)}
	switch n := r.IntN(10); {
	case n == 0:
		x.method = http.MethodHead
	case n < 3:
		x.method = http.MethodPost
		x.reqBody = randomSizes[r.IntN(len(randomSizes))]
		x.reqChunked = r.IntN(2) == 0
	}
	switch n := r.IntN(10); {
	case n < 5:
		x.framing = "cl"
	case n < 9:
		x.framing = "chunked"
	default:
		x.framing = "close"
	}
	if x.method == http.MethodGet && r.IntN(12) == 0 {
		x.status = []int{http.StatusNoContent, http.StatusNotModified}[r.IntN(2)]
	}
	x.pipelineNext = x.framing != "close" && r.IntN(4) == 0
	return x
}

// bodyless is true when the answer has no body whatever its framing says.
func (x randomExchange) bodyless() bool {
	return x.method == http.MethodHead || x.status == http.StatusNoContent || x.status == http.StatusNotModified
}

// patternBytes is n bytes drawn from seed: a byte lost, repeated or moved
// anywhere shows.
func patternBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	rand.NewChaCha8(s).Read(b)
	return b
}

// request is x's request as raw bytes and its body's SHA-256.
func (x randomExchange) request() (raw []byte, sum string) {
	q := url.Values{"seed": {strconv.FormatUint(x.seed, 10)}, "size": {strconv.Itoa(x.size)},
		"framing": {x.framing}, "status": {strconv.Itoa(x.status)}}
	var b bytes.Buffer
	host := "app.example"
	if x.origin != "" {
		host = x.origin
		fmt.Fprintf(&b, "%s http://%s/x?%s HTTP/1.1\r\n", x.method, x.origin, q.Encode())
	} else {
		fmt.Fprintf(&b, "%s /x?%s HTTP/1.1\r\n", x.method, q.Encode())
	}
	fmt.Fprintf(&b, "Host: %s\r\n", host)
	body := patternBytes(x.seed^0x5eed, x.reqBody)
	if x.method == http.MethodPost {
		if x.reqChunked {
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			writeChunked(&b, body, rand.New(rand.NewPCG(x.seed, 1)))
		} else {
			fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
			b.Write(body)
		}
	} else {
		b.WriteString("\r\n")
	}
	h := sha256.Sum256(body)
	return b.Bytes(), hex.EncodeToString(h[:])
}

// writeChunked writes body in chunks of random sizes and the last chunk.
func writeChunked(w io.Writer, body []byte, r *rand.Rand) {
	for len(body) > 0 {
		n := min(len(body), 1+r.IntN(70000))
		fmt.Fprintf(w, "%x\r\n", n)
		w.Write(body[:n])
		io.WriteString(w, "\r\n")
		body = body[n:]
	}
	io.WriteString(w, "0\r\n\r\n")
}

// randomBackend answers each request as its query asks, the body written
// in parts of random sizes, with the request body's SHA-256 in X-Req-Sha.
func randomBackend(tb testing.TB) string {
	tb.Helper()
	return rawBackend(tb, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(time.Minute))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			got, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			if !serveRandom(c, req, got) {
				return
			}
		}
	})
}

// serveRandom writes the answer req asks for; false when the connection
// ends with it.
func serveRandom(c net.Conn, req *http.Request, reqBody []byte) bool {
	q := req.URL.Query()
	seed, _ := strconv.ParseUint(q.Get("seed"), 10, 64)
	size, _ := strconv.Atoi(q.Get("size"))
	status, _ := strconv.Atoi(q.Get("status"))
	framing := q.Get("framing")
	sum := sha256.Sum256(reqBody)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nX-Req-Sha: %s\r\n", status, http.StatusText(status), hex.EncodeToString(sum[:]))
	bodyless := req.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified
	body := patternBytes(seed, size)
	r := rand.New(rand.NewPCG(seed, 2))
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		b.WriteString("\r\n")
	case framing == "cl":
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", size)
		if !bodyless {
			b.Write(body)
		}
	case framing == "chunked":
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if !bodyless {
			writeChunked(&b, body, r)
		}
	default: // close
		b.WriteString("Connection: close\r\n\r\n")
		if !bodyless {
			b.Write(body)
		}
	}
	for out := b.Bytes(); len(out) > 0; {
		n := min(len(out), 1+r.IntN(300<<10))
		if _, err := c.Write(out[:n]); err != nil {
			return false
		}
		out = out[n:]
	}
	return framing != "close" || status == http.StatusNoContent || status == http.StatusNotModified
}

// TestRandomExchangesArriveIntact: seeded random sequences of keep-alive
// exchanges (GET, HEAD, POST with a length or chunked; answers with a
// length, chunked or ending at close; 204 and 304; bodies from 0 to 3 MiB;
// requests written in parts, some pipelined) through http-reverse, for
// every in-process engine and auto: each answer arrives with its status,
// the back-end's header and every body byte, and some bodies moved
// through the engine. SPLICER_RANDOM_SEEDS=N runs N seeds instead of 4.
func TestRandomExchangesArriveIntact(t *testing.T) {
	seeds := randomSeeds()
	up := randomBackend(t)
	for _, engine := range []string{"copy", "pipe", "sockmap", "auto"} {
		t.Run(engine, func(t *testing.T) {
			if engine == "sockmap" {
				testenv.RequireRoot(t)
			}
			f := reverseProxy(t, engine, "", up)
			for seed := range uint64(seeds) {
				runRandomExchanges(t, f.Addr("rev").String(), "", seed, 24)
			}
			if n := fwdtest.Metric(f, "splicer_http_response_bytes_total", "listener", "rev", "way", "spliced"); n == 0 {
				t.Errorf("no body moved through engine %s: the test did not reach it", engine)
			}
		})
	}
}

// TestRandomExchangesEveryHTTPKind: the same through http-forward (the
// back-end named in absolute form) and filter, with their default engine.
func TestRandomExchangesEveryHTTPKind(t *testing.T) {
	up := randomBackend(t)
	f := fwdtest.Start(t, httpListeners(t, up)...)
	for _, kind := range []string{"http-forward", "filter"} {
		t.Run(kind, func(t *testing.T) {
			origin := ""
			if kind == "http-forward" {
				origin = up
			}
			for seed := range uint64(randomSeeds()) {
				runRandomExchanges(t, f.Addr(kind).String(), origin, seed, 24)
			}
		})
	}
}

// randomSeeds is how many seeds a random exchange test runs: 4, or
// SPLICER_RANDOM_SEEDS.
func randomSeeds() int {
	if s, err := strconv.Atoi(os.Getenv("SPLICER_RANDOM_SEEDS")); err == nil && s > 0 {
		return s
	}
	return 4
}

// runRandomExchanges sends n random exchanges from seed to the listener
// at addr, on one connection until an answer closes it, and checks every
// answer; origin, if set, is the back-end named in absolute form.
func runRandomExchanges(t *testing.T, addr, origin string, seed uint64, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	xs := make([]randomExchange, n)
	for i := range xs {
		xs[i] = newRandomExchange(r)
		xs[i].origin = origin
	}
	var c net.Conn
	var br *bufio.Reader
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	sent := 0 // exchanges whose requests went out
	for i, x := range xs {
		if c == nil {
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			br = bufio.NewReader(c)
		}
		for ; sent <= i; sent++ {
			writeInPieces(t, c, xs[sent], r)
		}
		if x.pipelineNext && sent < len(xs) {
			writeInPieces(t, c, xs[sent], r)
			sent++
		}
		where := fmt.Sprintf("seed %d, exchange %d (%+v)", seed, i, x)
		if !readRandomAnswer(t, br, x, where) {
			if sent > i+1 {
				t.Fatalf("%s: the proxy closed the connection with the next request sent", where)
			}
			c.Close()
			c = nil
		}
	}
}

// writeInPieces writes x's request in x.writePieces parts.
func writeInPieces(t *testing.T, c net.Conn, x randomExchange, r *rand.Rand) {
	t.Helper()
	raw, _ := x.request()
	for k := x.writePieces; k > 0 && len(raw) > 0; k-- {
		n := len(raw)
		if k > 1 {
			n = r.IntN(len(raw) + 1)
		}
		if _, err := c.Write(raw[:n]); err != nil {
			t.Fatalf("writing a request: %v", err)
		}
		raw = raw[n:]
	}
}

// readRandomAnswer reads x's answer and checks it; false when the proxy
// ends the connection after it.
func readRandomAnswer(t *testing.T, br *bufio.Reader, x randomExchange, where string) bool {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: x.method})
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", where, err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the body: %v", where, err)
	}
	if resp.StatusCode != x.status {
		t.Fatalf("%s: status %d, want %d", where, resp.StatusCode, x.status)
	}
	if _, sum := x.request(); resp.Header.Get("X-Req-Sha") != sum {
		t.Fatalf("%s: the back-end read another request body (X-Req-Sha %q, want %q)", where, resp.Header.Get("X-Req-Sha"), sum)
	}
	want := patternBytes(x.seed, x.size)
	if x.bodyless() {
		want = nil
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: body of %d bytes, want %d; first difference at %d", where, len(got), len(want), firstDiff(got, want))
	}
	if x.method == http.MethodHead && x.framing == "cl" && resp.ContentLength != int64(x.size) {
		t.Fatalf("%s: HEAD's Content-Length %d, want %d", where, resp.ContentLength, x.size)
	}
	return !resp.Close && !strings.EqualFold(resp.Header.Get("Connection"), "close")
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Package httprand is test support: seeded random HTTP/1.1 keep-alive exchanges through a proxy, with a back-end that answers as each request asks and a client that checks every answer byte for byte.
//
// A request names its answer in its query (status, body length, framing,
// the seed of the body's bytes); the back-end echoes the SHA-256 of the
// request body it read in X-Req-Sha. Sizes cross every bound where
// http-reverse moves a body another way, so one sequence takes the copy,
// splice(2) and engine paths in turn.
package httprand

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/testenv"
)

// Sizes cross every bound where http-reverse moves a body another way:
// within the head reader (16 KiB), copied through the body buffer, with
// splice(2) past 64 KiB, through the engine from 512 KiB
// (httpcore.ReverseCopyBelow).
var Sizes = []int{0, 1, 100, 4 << 10, 16<<10 - 1, 16<<10 + 1, 64 << 10, 64<<10 + 1, 200 << 10,
	512<<10 - 1, 512<<10 + 3, 1<<20 + 17, 3 << 20}

// Seeds is how many seeds a random exchange test runs: 4, or
// SPLICER_RANDOM_SEEDS for a longer campaign.
func Seeds() int {
	if s, err := strconv.Atoi(os.Getenv("SPLICER_RANDOM_SEEDS")); err == nil && s > 0 {
		return s
	}
	return 4
}

// exchange is one request and what the back-end is asked to answer.
type exchange struct {
	method       string
	reqBody      int    // request body length (POST)
	reqChunked   bool   // the request body chunked, else with a length
	size         int    // response body length
	framing      string // cl, chunked or close (no length, ends at close)
	status       int
	seed         uint64 // of the response body's bytes
	writePieces  int    // the request written in this many parts
	pipelineNext bool   // the next request, if it has no body, sent before this answer is read
	// origin is the back-end as an http-forward client names it in the
	// request line (absolute form); empty for the origin form.
	origin string
}

func newExchange(r *rand.Rand) exchange {
	x := exchange{method: http.MethodGet, status: http.StatusOK, seed: r.Uint64(),
		size: Sizes[r.IntN(len(Sizes))], writePieces: 1 + r.IntN(3)}
	switch n := r.IntN(10); {
	case n == 0:
		x.method = http.MethodHead
	case n < 3:
		x.method = http.MethodPost
		x.reqBody = Sizes[r.IntN(len(Sizes))]
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
func (x exchange) bodyless() bool {
	return x.method == http.MethodHead || x.status == http.StatusNoContent || x.status == http.StatusNotModified
}

// request is x's request as raw bytes and its body's SHA-256.
func (x exchange) request() (raw []byte, sum string) {
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
	body := enginetest.Random(x.reqBody, x.seed^0x5eed)
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

// exchangeTimeout bounds each exchange, generous for links that lose
// segments: one may take several retransmission timeouts.
const exchangeTimeout = time.Minute

// Serve answers the requests on c as their queries ask, each answer
// written in parts of random sizes, until c fails or an answer ends at
// close; the caller closes c.
func Serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(exchangeTimeout))
	testenv.EachRequest(bufio.NewReader(c), func(req *http.Request, got []byte) bool {
		if !answer(c, req, got) {
			return false
		}
		c.SetDeadline(time.Now().Add(exchangeTimeout))
		return true
	})
}

// answer writes the answer req asks for; false when the connection ends
// with it.
func answer(c net.Conn, req *http.Request, reqBody []byte) bool {
	q := req.URL.Query()
	seed, _ := strconv.ParseUint(q.Get("seed"), 10, 64)
	size, _ := strconv.Atoi(q.Get("size"))
	status, _ := strconv.Atoi(q.Get("status"))
	framing := q.Get("framing")
	sum := sha256.Sum256(reqBody)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nX-Req-Sha: %s\r\n", status, http.StatusText(status), hex.EncodeToString(sum[:]))
	noBody := status == http.StatusNoContent || status == http.StatusNotModified
	bodyless := req.Method == http.MethodHead || noBody
	body := enginetest.Random(size, seed)
	r := rand.New(rand.NewPCG(seed, 2))
	switch {
	case noBody:
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
	return framing != "close" || noBody
}

// Run sends n random exchanges drawn from seed through the proxy that
// dial connects to, on one connection until an answer ends it, and fails
// tb at the first answer that differs from what the back-end (Serve)
// sent; origin, if set, is the back-end's address, named in absolute
// form as clients of a forward proxy do.
func Run(tb testing.TB, dial func() net.Conn, origin string, seed uint64, n int) {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 0))
	xs := make([]exchange, n)
	for i := range xs {
		xs[i] = newExchange(r)
		xs[i].origin = origin
	}
	// A client may half-close once its last request is out and still
	// read the answers: nothing in HTTP/1.1 forbids it.
	halfClose := r.IntN(2) == 0
	var c net.Conn
	var br *bufio.Reader
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	sent := 0                       // exchanges whose requests went out
	sums := make([]string, len(xs)) // their bodies' SHA-256, as the back-end echoes it
	for i, x := range xs {
		if c == nil {
			c = dial()
			br = bufio.NewReader(c)
		}
		c.SetDeadline(time.Now().Add(exchangeTimeout))
		for ; sent <= i; sent++ {
			sums[sent] = writeInPieces(tb, c, xs[sent], r)
		}
		// Only a request without a body follows unanswered: this client
		// reads no answer while it writes, and a body the proxy will not
		// read before the answer is out could fill both ways' buffers.
		if x.pipelineNext && sent < len(xs) && xs[sent].method != http.MethodPost {
			sums[sent] = writeInPieces(tb, c, xs[sent], r)
			sent++
		}
		if halfClose && sent == len(xs) {
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				tb.Fatalf("half-closing after the last request: %v", err)
			}
			halfClose = false
		}
		where := fmt.Sprintf("seed %d, exchange %d (%+v)", seed, i, x)
		if !readAnswer(tb, br, x, sums[i], where) {
			if sent > i+1 {
				tb.Fatalf("%s: the proxy closed the connection with the next request sent", where)
			}
			c.Close()
			c = nil
		}
	}
}

// writeInPieces writes x's request in x.writePieces parts and returns
// its body's SHA-256.
func writeInPieces(tb testing.TB, c net.Conn, x exchange, r *rand.Rand) (sum string) {
	tb.Helper()
	raw, sum := x.request()
	for k := x.writePieces; k > 0 && len(raw) > 0; k-- {
		n := len(raw)
		if k > 1 {
			n = r.IntN(len(raw) + 1)
		}
		if _, err := c.Write(raw[:n]); err != nil {
			tb.Fatalf("writing a request: %v", err)
		}
		raw = raw[n:]
	}
	return sum
}

// readAnswer reads x's answer and checks it, sum being the SHA-256 of the
// request body sent; false when the proxy ends the connection after it.
func readAnswer(tb testing.TB, br *bufio.Reader, x exchange, sum, where string) bool {
	tb.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: x.method})
	if err != nil {
		tb.Fatalf("%s: reading the answer: %v", where, err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s: reading the body: %v", where, err)
	}
	if resp.StatusCode != x.status {
		tb.Fatalf("%s: status %d, want %d", where, resp.StatusCode, x.status)
	}
	if resp.Header.Get("X-Req-Sha") != sum {
		tb.Fatalf("%s: the back-end read another request body (X-Req-Sha %q, want %q)", where, resp.Header.Get("X-Req-Sha"), sum)
	}
	want := enginetest.Random(x.size, x.seed)
	if x.bodyless() {
		want = nil
	}
	if !bytes.Equal(got, want) {
		tb.Fatalf("%s: body of %d bytes, want %d; first difference at %d", where, len(got), len(want), firstDiff(got, want))
	}
	if x.method == http.MethodHead && x.framing == "cl" && resp.ContentLength != int64(x.size) {
		tb.Fatalf("%s: HEAD's Content-Length %d, want %d", where, resp.ContentLength, x.size)
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

// Abort sends up to n-1 random exchanges drawn from seed through the proxy
// that dial connects to, one at a time, checking each answer, then
// resets the connection at a random point of one more: partway through
// its request, with the request sent, partway through its answer, or
// after a chunked body that turned malformed (malformedChunks). What it
// tests is that the proxy gives nothing of it to another client (Run
// beside it) nor keeps a half-used upstream connection for one.
func Abort(tb testing.TB, dial func() net.Conn, origin string, seed uint64, n int) {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	c := dial()
	defer func() { resetConn(c) }()
	br := bufio.NewReader(c)
	for i := range r.IntN(n) {
		x := newExchange(r)
		x.origin, x.pipelineNext = origin, false
		c.SetDeadline(time.Now().Add(exchangeTimeout))
		sum := writeInPieces(tb, c, x, r)
		if !readAnswer(tb, br, x, sum, fmt.Sprintf("aborting seed %d, exchange %d (%+v)", seed, i, x)) {
			c.Close()
			c = dial()
			br = bufio.NewReader(c)
		}
	}
	x := newExchange(r)
	x.origin = origin
	raw, _ := x.request()
	c.SetDeadline(time.Now().Add(exchangeTimeout))
	switch r.IntN(4) {
	case 0:
		c.Write(raw[:r.IntN(len(raw))])
	case 1:
		c.Write(raw)
	case 2:
		malformedChunks(tb, c, br, x, seed)
	default:
		// Errors do not matter here: the proxy may answer before the
		// whole request is out, or end the connection. Every answer has
		// its body's length in bytes and a head longer than 40.
		n := r.IntN(40)
		if !x.bodyless() {
			n += r.IntN(x.size + 1)
		}
		if _, err := c.Write(raw); err == nil {
			io.CopyN(io.Discard, br, int64(n))
		}
	}
}

// RunBesideAborts runs, for each of Seeds() seeds at once, a client of
// exchanges random exchanges (Run) beside one that resets aborts times
// (Abort), each in a parallel subtest of t, and returns once all have
// ended. dial(tb) returns a dial for Run and Abort that fails tb.
func RunBesideAborts(t *testing.T, dial func(tb testing.TB) func() net.Conn, origin string, exchanges, aborts int) {
	t.Helper()
	t.Run("clients", func(t *testing.T) {
		for seed := range uint64(Seeds()) {
			t.Run(fmt.Sprint("intact ", seed), func(t *testing.T) {
				t.Parallel()
				Run(t, dial(t), origin, seed, exchanges)
			})
			t.Run(fmt.Sprint("aborting ", seed), func(t *testing.T) {
				t.Parallel()
				for k := range uint64(aborts) {
					Abort(t, dial(t), origin, seed<<8|k, 4)
				}
			})
		}
	})
}

// malformedChunks sends x as a POST whose chunked body turns malformed
// after its last valid chunk (a size line that is no number). The proxy
// has passed the first chunks on; it must end the exchange at once, with
// a 400 (the client's fault) or by closing, and keep nothing of that
// upstream connection.
func malformedChunks(tb testing.TB, c net.Conn, br *bufio.Reader, x exchange, seed uint64) {
	tb.Helper()
	x.method, x.reqChunked, x.reqBody = http.MethodPost, true, max(x.reqBody, 1)
	raw, _ := x.request()
	raw = append(raw[:len(raw)-len("0\r\n\r\n")], "zz\r\n\r\n"...)
	if _, err := c.Write(raw); err != nil {
		return // the proxy may end the connection before the body is out
	}
	c.SetReadDeadline(time.Now().Add(malformedBound))
	resp, err := http.ReadResponse(br, &http.Request{Method: x.method})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		tb.Errorf("aborting seed %d: a malformed chunked body (%d bytes valid): the proxy neither answered nor closed within %v", seed, x.reqBody, malformedBound)
	case err == nil && resp.StatusCode != http.StatusBadRequest:
		tb.Errorf("aborting seed %d: a malformed chunked body answered %s, want 400", seed, resp.Status)
	}
}

// malformedBound is how long a proxy may take to end an exchange whose
// request went bad.
const malformedBound = 10 * time.Second

// resetConn closes c with a reset (SO_LINGER 0), as a client that gives up.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

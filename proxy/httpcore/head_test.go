// Tests of head reading and framing: limits, body bytes left unread, chunked streaming, the heads the proxy writes.

package httpcore

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestReadHeadStopsAtTheBody(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("\r\nGET / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbodyNEXT"), 16)
	head, err := readHead(br, Limits{MaxHeaderBytes: 1024, MaxHeaders: 10})
	if err != nil {
		t.Fatal(err)
	}
	if string(head) != "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n" {
		t.Errorf("head %q", head)
	}
	rest, _ := io.ReadAll(br)
	if string(rest) != "bodyNEXT" {
		t.Errorf("left %q in the reader, want the body and what follows", rest)
	}
}

func TestReadHeadLimits(t *testing.T) {
	lim := Limits{MaxHeaderBytes: 100, MaxHeaders: 2}
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"two headers", "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", nil},
		{"three headers", "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", errTooManyHeaders},
		{"long line", "GET / HTTP/1.1\r\nA: " + strings.Repeat("x", 100) + "\r\n\r\n", errHeadTooLarge},
		{"cut short", "GET / HTTP/1.1\r\nA: 1\r\n", io.ErrUnexpectedEOF},
	} {
		_, err := readHead(bufio.NewReaderSize(strings.NewReader(tc.in), 16), lim)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestCopyChunkedCopiesExactlyOneBody: one body is copied, its chunk-size
// lines as they came (CopyChunked, the filter's) or in the proxy's own
// framing, sizes in hex without extensions or leading zeros
// (relayChunked); either way with the trailer's fields but those that
// frame or route a message.
func TestCopyChunkedCopiesExactlyOneBody(t *testing.T) {
	body := "5;ext=1\r\nhello\r\n01A ; a=\"b;c\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0;last\r\nX-Sum: x\r\nte: x\r\nhost: y\r\n\r\n"
	for _, c := range []struct {
		name string
		copy func(io.Writer, *bufio.Reader) error
		want string
	}{
		{"CopyChunked", CopyChunked, "5;ext=1\r\nhello\r\n01A ; a=\"b;c\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0;last\r\nX-Sum: x\r\n\r\n"},
		{"relayChunked", func(w io.Writer, r *bufio.Reader) error { return relayChunked(w, r, 0) },
			"5\r\nhello\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: x\r\n\r\n"},
	} {
		br := bufio.NewReaderSize(strings.NewReader(body+"GET /next"), 16)
		var out bytes.Buffer
		if err := c.copy(&out, br); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if out.String() != c.want {
			t.Errorf("%s copied %q, want %q", c.name, out.String(), c.want)
		}
		rest, _ := io.ReadAll(br)
		if string(rest) != "GET /next" {
			t.Errorf("%s left %q", c.name, rest)
		}
	}
}

func TestCopyChunkedRejectsMalformed(t *testing.T) {
	for _, in := range []string{"zz\r\n", "5\r\nhelloXX\r\n", "5\r\nhel", strings.Repeat("0", 20) + "1\r\n",
		// a control character in an extension; trailer lines that are no field lines
		"5;a\rb\r\nhello\r\n0\r\n\r\n",
		"0\r\nno colon\r\n\r\n", "0\r\nX-A : b\r\n\r\n", "0\r\nX-A: b\r\n folded\r\n\r\n",
		"0\r\nX-A: b\x00c\r\n\r\n", "0\r\n: b\r\n\r\n", "0\r\nX(A): b\r\n\r\n"} {
		err := CopyChunked(io.Discard, bufio.NewReader(strings.NewReader(in)))
		if err == nil {
			t.Errorf("%q: copied without error", in)
		}
	}
}

func TestResponseBodyKinds(t *testing.T) {
	get := &http.Request{Method: http.MethodGet}
	head := &http.Request{Method: http.MethodHead}
	for _, tc := range []struct {
		req  *http.Request
		resp *http.Response
		want bodyKind
	}{
		{get, &http.Response{StatusCode: 200, ContentLength: 10}, bodyLength},
		{get, &http.Response{StatusCode: 200, ContentLength: 0}, bodyNone},
		{get, &http.Response{StatusCode: 200, ContentLength: -1}, bodyUntilClose},
		{get, &http.Response{StatusCode: 200, ContentLength: -1, TransferEncoding: []string{"chunked"}}, bodyChunked},
		{head, &http.Response{StatusCode: 200, ContentLength: 10}, bodyNone},
		{get, &http.Response{StatusCode: 204, ContentLength: -1}, bodyNone},
		{get, &http.Response{StatusCode: 304, ContentLength: 10}, bodyNone},
	} {
		if got := responseBody(tc.req, tc.resp); got != tc.want {
			t.Errorf("%s %d (length %d, te %v): kind %d, want %d", tc.req.Method, tc.resp.StatusCode,
				tc.resp.ContentLength, tc.resp.TransferEncoding, got, tc.want)
		}
	}
}

func TestRequestHeadForwardsEndToEndHeadersOnly(t *testing.T) {
	raw := "GET http://h.example:8080/p?q=1 HTTP/1.1\r\nHost: h.example:8080\r\nProxy-Connection: keep-alive\r\n" +
		"Connection: X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\nProxy-Authorization: secret\r\n\r\n"
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	got := string(requestHead(req, ""))
	want := "GET /p?q=1 HTTP/1.1\r\nHost: h.example:8080\r\nX-End: 2\r\n\r\n"
	if got != want {
		t.Errorf("head\n%q\nwant\n%q", got, want)
	}
}

func TestResponseHeadSaysWhetherTheConnectionStays(t *testing.T) {
	req := &http.Request{Method: http.MethodGet, ProtoMajor: 1, ProtoMinor: 0}
	resp := &http.Response{Status: "200 OK", StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: 3,
		Header: http.Header{"Keep-Alive": {"timeout=5"}, "X-A": {"b"}}}
	if got := string(responseHead(req, resp, bodyLength, true)); got != "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\nX-A: b\r\n\r\n" {
		t.Errorf("keep-alive to an HTTP/1.0 client: %q", got)
	}
	req.ProtoMinor = 1
	if got := string(responseHead(req, resp, bodyLength, false)); got != "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\nX-A: b\r\n\r\n" {
		t.Errorf("closing: %q", got)
	}
}

func TestStripHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":        {"X-Secret, keep-alive", " upgrade"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Content-Length":    {"3"},
		"Proxy-Connection":  {"close"},
		"Te":                {"trailers"},
		"Upgrade":           {"websocket"},
		"X-Secret":          {"named by Connection"},
		"Accept":            {"*/*"},
	}
	StripHopByHop(h)
	if len(h) != 1 || h.Get("Accept") != "*/*" {
		t.Errorf("left %v, want only Accept", h)
	}
}

// Fuzz targets for the HTTP head reader and checks and the chunked decoder: no input panics, and what the strict checks accept net/http can parse.

package httpcore

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: a\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
		"GET http://h:8080/ HTTP/1.0\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxHeaderBytes: 4096, MaxHeaders: 50}
	f.Fuzz(func(t *testing.T, in []byte) {
		head, err := readHead(bufio.NewReaderSize(bytes.NewReader(in), 16), lim)
		if err != nil {
			return
		}
		if len(head) > lim.MaxHeaderBytes {
			t.Fatalf("head of %d bytes passed a %d-byte limit", len(head), lim.MaxHeaderBytes)
		}
		if ValidateHead(head, true) != nil {
			return
		}
		// A head the strict checks pass has one framing: net/http must not
		// find both a length and chunking in it.
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			return
		}
		if req.ContentLength > 0 && len(req.TransferEncoding) > 0 {
			t.Fatalf("accepted head with two framings: %q", head)
		}
	})
}

func FuzzResponseHead(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\tx\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		head, err := readHead(bufio.NewReader(bytes.NewReader(in)), ResponseLimits)
		if err == nil {
			ValidateHead(head, false)
		}
	})
}

func FuzzChunked(f *testing.F) {
	f.Add("5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n")
	f.Add("+5\r\nhello\r\n0\r\n\r\n")
	f.Add("fffffffffffffff\r\n")
	f.Fuzz(func(t *testing.T, body string) {
		var out bytes.Buffer
		br := bufio.NewReaderSize(strings.NewReader(body), 16)
		if err := CopyChunked(&out, br); err != nil {
			return
		}
		// The copy is canonical (CRLF line ends): decoding it again gives
		// it back byte for byte, so the next hop frames the body as we did.
		var again bytes.Buffer
		if err := CopyChunked(&again, bufio.NewReader(bytes.NewReader(out.Bytes()))); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
			t.Fatalf("copy %q decodes to %q, %v", out.Bytes(), again.Bytes(), err)
		}
		rest, _ := io.ReadAll(br)
		if len(rest) > len(body) {
			t.Fatalf("left %d of %d bytes", len(rest), len(body))
		}
	})
}

// Differential fuzzing of the hand-written head parser against ValidateHead and net/http, and its allocations.

package httpcore

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

var fastSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x/y.html?a=1&b=%20 HTTP/1.1\r\nHost: app.example:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nconnection: keep-alive, Close\r\n\r\n",
	"GET /p? HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nX-A: 1\r\nx-a:  2 \r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"GET /a!b#f HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX : 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n X: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r2\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 1024\r\nETag: \"x\"\r\nConnection: close\r\n\r\n",
	"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
}

// FuzzFastParse holds fastRequest and fastResponse to the full path: a head
// they take, ValidateHead passes and net/http parses to the same fields.
func FuzzFastParse(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, head []byte, isHead bool) {
		if req, ok := fastRequest(head); ok {
			if err := ValidateHead(head, true); err != nil {
				t.Fatalf("fastRequest took %q, which ValidateHead refuses: %v", head, err)
			}
			want, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
			if err != nil {
				t.Fatalf("fastRequest took %q, which net/http refuses: %v", head, err)
			}
			want.Body = http.NoBody
			if !reflect.DeepEqual(req, want) {
				t.Fatalf("%q:\nfast     %+v %+v\nnet/http %+v %+v", head, req, req.URL, want, want.URL)
			}
		}
		method := http.MethodGet
		if isHead {
			method = http.MethodHead
		}
		req := &http.Request{Method: method}
		if resp, ok := fastResponse(head, req); ok {
			if err := ValidateHead(head, false); err != nil {
				t.Fatalf("fastResponse took %q, which ValidateHead refuses: %v", head, err)
			}
			want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), req)
			if err != nil {
				t.Fatalf("fastResponse took %q, which net/http refuses: %v", head, err)
			}
			want.Body = http.NoBody
			if !reflect.DeepEqual(resp, want) {
				t.Fatalf("%q:\nfast     %+v\nnet/http %+v", head, resp, want)
			}
		}
	})
}

// TestFastParseCommon: the heads of a plain GET and its response take the
// fast path.
func TestFastParseCommon(t *testing.T) {
	req, ok := fastRequest([]byte(fastSeeds[1]))
	if !ok {
		t.Fatal("a common request declined")
	}
	if _, ok := fastResponse([]byte(fastSeeds[15]), req); !ok {
		t.Fatal("a common response declined")
	}
}

func BenchmarkParseRequest(b *testing.B) {
	head := []byte("GET /obj/1024 HTTP/1.1\r\nHost: app.example\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			fastRequest(head)
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ValidateHead(head, true)
			parseRequest(head)
		}
	})
}

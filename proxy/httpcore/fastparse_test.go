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
// they take, ValidateHead passes and net/http parses to the same fields;
// built in new memory or in that of an earlier exchange (Conn.Reuse).
func FuzzFastParse(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, head []byte, isHead bool) {
		checkFastParse(t, head, isHead, nil)
		checkFastParse(t, head, isHead, usedMem(t))
	})
}

// usedMem is exchange memory that held a request and a response with more
// fields than most, as a Conn's would after an exchange.
func usedMem(tb testing.TB) *exchangeMem {
	tb.Helper()
	mem := new(exchangeMem)
	req, ok := fastRequest([]byte(fastSeeds[3]), mem)
	if !ok {
		tb.Fatal("seed request declined")
	}
	req.Header["Forwarded"] = []string{"for=1.2.3.4"} // as a proxy adds
	if _, ok := fastResponse([]byte(fastSeeds[15]), req, mem); !ok {
		tb.Fatal("seed response declined")
	}
	return mem
}

func checkFastParse(t *testing.T, head []byte, isHead bool, mem *exchangeMem) {
	t.Helper()
	if req, ok := fastRequest(head, mem); ok {
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
	if resp, ok := fastResponse(head, req, mem); ok {
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
}

// TestFastParseCommon: the heads of a plain GET and its response take the
// fast path.
func TestFastParseCommon(t *testing.T) {
	req, ok := fastRequest([]byte(fastSeeds[1]), nil)
	if !ok {
		t.Fatal("a common request declined")
	}
	if _, ok := fastResponse([]byte(fastSeeds[15]), req, nil); !ok {
		t.Fatal("a common response declined")
	}
}

func BenchmarkParseRequest(b *testing.B) {
	head := []byte("GET /obj/1024 HTTP/1.1\r\nHost: app.example\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			fastRequest(head, nil)
		}
	})
	b.Run("fast-reuse", func(b *testing.B) {
		b.ReportAllocs()
		mem := new(exchangeMem)
		for range b.N {
			fastRequest(head, mem)
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

// TestHeaderMemDropsLargeMaps: the memory of a head with many fields is not
// kept for the next head, which would pay to clear it.
func TestHeaderMemDropsLargeMaps(t *testing.T) {
	var m headerMem
	h, vals := m.take("")
	h["A"] = []string{"1"}
	m.keep(append(vals, "1"))
	if again, vals := m.take(""); len(again) != 0 || reflect.ValueOf(again).UnsafePointer() != reflect.ValueOf(h).UnsafePointer() || len(vals) != 0 || vals[:1][0] != "" {
		t.Fatal("a small map and its values were not kept, cleared")
	}
	big, vals := m.take("")
	for i := range keptFields + 1 {
		vals = append(vals, "v")
		big[string(rune('A'+i))] = vals[i : i+1]
	}
	m.keep(vals)
	if next, vals := m.take(""); reflect.ValueOf(next).UnsafePointer() == reflect.ValueOf(big).UnsafePointer() || cap(vals) > keptFields {
		t.Fatal("a map of more than keptFields fields was kept")
	}
}

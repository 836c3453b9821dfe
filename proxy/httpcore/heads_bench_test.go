// Benchmarks of writing the heads the proxy sends: a small request upstream and its response to the client.

package httpcore

import "testing"

func BenchmarkAppendHeads(b *testing.B) {
	mem := new(exchangeMem)
	req, ok := fastRequest([]byte("GET /obj/1024 HTTP/1.1\r\nHost: 10.99.1.1:7421\r\n\r\n"), mem)
	if !ok {
		b.Fatal("request declined")
	}
	req.Header["Forwarded"] = []string{`for=10.99.1.2;proto=http;host="10.99.1.1:7421"`}
	req.Header["X-Forwarded-For"] = []string{"10.99.1.2"}
	req.Header["X-Forwarded-Proto"] = []string{"http"}
	resp, ok := fastResponse([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nContent-Type: application/octet-stream\r\n"+
		"Date: Wed, 25 Nov 2026 12:00:00 GMT\r\n\r\n"), req, mem)
	if !ok {
		b.Fatal("response declined")
	}
	buf := make([]byte, 0, 1024)
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			buf = appendRequestHead(buf[:0], req, "", req.Close)
		}
	})
	b.Run("response", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			buf = appendResponseHead(buf[:0], req, resp, bodyLength, true)
		}
	})
}

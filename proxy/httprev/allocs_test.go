// Allocations per request on http-reverse's small-object path: a keep-alive client, a 1 KiB response that comes with its head; and bytes per request for a client that opens a connection per request.

package httprev_test

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

// maxAllocsPerRequest is the proxy's budget for one 1 KiB GET on a kept
// connection: none, so that small requests bring no garbage collection
// (each a stop of the world, the proxy's p99). It was 69 before the
// hand-written parser, 12 before requests and responses were built in the
// memory of the last, and 3 before the heads' text and the Forwarded
// value were too.
const maxAllocsPerRequest = 0

func TestHTTPReverseAllocsPerRequest(t *testing.T) {
	body := strings.Repeat("x", 1<<10)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nContent-Type: application/octet-stream\r\n" +
		"Date: Wed, 25 Nov 2026 12:00:00 GMT\r\n\r\n" + body)
	up := fwdtest.RawBackend(t, func(c net.Conn) { fwdtest.AnswerEveryHead(c, resp) })
	c := dialReverse(t, "copy", up)
	req := []byte("GET /obj/1024 HTTP/1.1\r\nHost: app.example\r\nUser-Agent: wrk\r\n\r\n")
	buf := make([]byte, 4<<10)
	get := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if err := readResponse(c, buf, len(body)); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // the connection's buffers, the upstream, the pool
		get()
	}
	n := testing.AllocsPerRun(1000, get)
	t.Logf("%.1f allocations per request", n)
	if n > maxAllocsPerRequest {
		t.Errorf("%.1f allocations per request, want at most %d", n, maxAllocsPerRequest)
	}
}

// maxBytesPerClosingRequest bounds what the whole process (client,
// forwarder, back-end) allocates for one 1 KiB GET on a connection of its
// own: a new connection's head readers (16 KiB each) and head memory come
// from a pool, not the heap. It was 40 KiB before they did.
const maxBytesPerClosingRequest = 16 << 10

func TestHTTPReverseBytesPerClosingRequest(t *testing.T) {
	body := strings.Repeat("x", 1<<10)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + body)
	addr := reverseAnswering(t, resp)
	req := []byte("GET /obj/1024 HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n\r\n")
	get := func() {
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		defer c.Close()
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c) // to the proxy's close
		if err != nil || !bytes.HasSuffix(got, []byte(body)) {
			t.Fatalf("%d bytes, %v; want the response, then the close", len(got), err)
		}
	}
	for range 50 { // the pools fill
		get()
	}
	const n = 500
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		get()
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated per request", per)
	if per > maxBytesPerClosingRequest {
		t.Errorf("%d bytes allocated per Connection: close request, want at most %d", per, maxBytesPerClosingRequest)
	}
}

// reverseAnswering runs http-reverse (engine copy) in front of a back end
// that answers every request head with resp, and returns the listener's
// address: for clients that each open connections of their own.
func reverseAnswering(tb testing.TB, resp []byte) string {
	tb.Helper()
	up := fwdtest.RawBackend(tb, func(c net.Conn) { fwdtest.AnswerEveryHead(c, resp) })
	return fwdtest.ReverseProxy(tb, "copy", "", up).Addr("rev").String()
}

// readResponse reads one response with a body of size bytes from c into
// buf, which holds it whole.
func readResponse(c net.Conn, buf []byte, size int) error {
	n := 0
	for {
		k, err := c.Read(buf[n:])
		if err != nil {
			return err
		}
		n += k
		if end := bytes.Index(buf[:n], []byte("\r\n\r\n")); end >= 0 && n >= end+4+size {
			if n > end+4+size {
				return io.ErrUnexpectedEOF // more than one response
			}
			return nil
		}
	}
}

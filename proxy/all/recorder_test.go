// recordingOrigin: a loopback back end that keeps every request it received, as it received it, for tests of what http-reverse lets through.

package all_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// recordingOrigin answers every request 200 with the body "ok" and keeps
// what it received: each request parsed (its body read whole), and every
// connection's bytes as they came.
type recordingOrigin struct {
	addr string
	mu   sync.Mutex
	reqs []*http.Request // Body read into bodies
	body [][]byte
	raw  []*bytes.Buffer // one per connection
}

func newRecordingOrigin(tb testing.TB) *recordingOrigin {
	tb.Helper()
	o := &recordingOrigin{}
	o.addr = rawBackend(tb, o.serve)
	return o
}

func (o *recordingOrigin) serve(c net.Conn) {
	raw := &bytes.Buffer{}
	o.mu.Lock()
	o.raw = append(o.raw, raw)
	o.mu.Unlock()
	r := bufio.NewReader(io.TeeReader(c, lockedWriter{&o.mu, raw}))
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return // not a whole request: not recorded
		}
		o.mu.Lock()
		o.reqs = append(o.reqs, req)
		o.body = append(o.body, body)
		o.mu.Unlock()
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

// Requests returns the whole requests received so far.
func (o *recordingOrigin) Requests() []*http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*http.Request(nil), o.reqs...)
}

// Bodies returns the bodies of Requests, in order.
func (o *recordingOrigin) Bodies() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]byte(nil), o.body...)
}

// Raw returns every byte received so far, connection after connection.
func (o *recordingOrigin) Raw() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var all []byte
	for _, b := range o.raw {
		all = append(all, b.Bytes()...)
	}
	return string(all)
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

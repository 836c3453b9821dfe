// RecordingOrigin: a loopback back end that keeps every request it received, as it received it, for tests of what http-reverse lets through.

package fwdtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

// RecordingOrigin answers every request 200 with the body "ok" and keeps
// what it received: each request parsed (its body read whole), and every
// connection's bytes as they came.
type RecordingOrigin struct {
	// Addr is the loopback host:port it listens on.
	Addr string
	mu   sync.Mutex
	reqs []*http.Request // Body read into bodies
	body [][]byte
	raw  []*bytes.Buffer // one per connection
}

// NewRecordingOrigin serves a RecordingOrigin until the test ends.
func NewRecordingOrigin(tb testing.TB) *RecordingOrigin {
	tb.Helper()
	o := &RecordingOrigin{}
	o.Addr = RawBackend(tb, o.serve)
	return o
}

func (o *RecordingOrigin) serve(c net.Conn) {
	raw := &bytes.Buffer{}
	o.mu.Lock()
	o.raw = append(o.raw, raw)
	o.mu.Unlock()
	// A request not read whole is not recorded.
	r := bufio.NewReader(io.TeeReader(c, lockedWriter{&o.mu, raw}))
	testenv.EachRequest(r, func(req *http.Request, body []byte) bool {
		o.mu.Lock()
		o.reqs = append(o.reqs, req)
		o.body = append(o.body, body)
		o.mu.Unlock()
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
}

// Requests returns the whole requests received so far.
func (o *RecordingOrigin) Requests() []*http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*http.Request(nil), o.reqs...)
}

// Bodies returns the bodies of Requests, in order.
func (o *RecordingOrigin) Bodies() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]byte(nil), o.body...)
}

// Raw returns every byte received so far, connection after connection.
func (o *RecordingOrigin) Raw() string {
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

// The formats' lines as written, field by field, and a rotated file reopened.

package accesslog

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var at = time.Date(2026, 10, 10, 13, 55, 36, 0, time.FixedZone("", 2*3600))

func request() *Entry {
	return &Entry{Type: "request", Time: at, Listener: "web", Kind: "http-reverse", Client: "10.99.1.2:40000",
		Method: "GET", Host: "app.example", Target: "/obj/1?x=1", Protocol: "HTTP/1.1", Status: 200,
		BytesUp: 80, BytesDown: 1100, Duration: 1500 * time.Microsecond, UpstreamDuration: time.Millisecond,
		UserAgent: "curl/8.14", Referer: "http://a.example/", RequestID: "abc",
		Upstream: "10.99.2.2:80", Engine: "pipe"}
}

func written(tb testing.TB, format string, entries ...*Entry) string {
	tb.Helper()
	var buf bytes.Buffer
	l, err := New(&buf, format)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		l.Log(e)
	}
	return buf.String()
}

func TestCombinedLines(t *testing.T) {
	tcp := &Entry{Type: "pair", Time: at, Kind: "tcp", Client: "[2001:db8::1]:5000", Upstream: "10.99.2.2:80",
		BytesDown: 42, Reason: "upstream_refused"}
	httpPair := &Entry{Type: "pair", Time: at, Kind: "http-reverse", Client: "10.99.1.2:1"}
	evil := &Entry{Type: "request", Time: at, Client: "10.99.1.2:1", Method: "GET", Target: "/\"x\\\n",
		Protocol: "HTTP/1.0", Status: 400, UserAgent: "a\" \"b", Referer: "é"}
	got := written(t, Combined, request(), tcp, httpPair, evil)
	want := `10.99.1.2 - - [10/Oct/2026:13:55:36 +0200] "GET /obj/1?x=1 HTTP/1.1" 200 1100 "http://a.example/" "curl/8.14"
2001:db8::1 - - [10/Oct/2026:13:55:36 +0200] "CONNECT 10.99.2.2:80 tcp" 502 42 "-" "-"
10.99.1.2 - - [10/Oct/2026:13:55:36 +0200] "GET /\x22x\x5C\x0A HTTP/1.0" 400 0 "\xC3\xA9" "a\x22 \x22b"
`
	if got != want {
		t.Errorf("combined lines:\n%s\nwant:\n%s", got, want)
	}
}

func TestJSONFieldSetIsFixed(t *testing.T) {
	pair := &Entry{Type: "pair", Time: at, Listener: "t", Kind: "tcp", Client: "10.99.1.2:1",
		Upstream: "10.99.2.2:80", Engine: "ip", BytesUp: 5, BytesDown: 7, Duration: 2 * time.Second,
		Reason: "eof", Err: "bad\x00\xff"}
	lines := strings.Split(strings.TrimSpace(written(t, JSON, request(), pair)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), lines)
	}
	wantKeys := []string{"time", "type", "listener", "proxy", "client", "method", "host", "path", "protocol",
		"status", "bytes_up", "bytes_down", "duration_s", "upstream_s", "user_agent", "referer", "request_id",
		"upstream", "engine", "reason", "note", "err"}
	var req, pr map[string]any
	for i, m := range []*map[string]any{&req, &pr} {
		dec := json.NewDecoder(strings.NewReader(lines[i]))
		if err := dec.Decode(m); err != nil {
			t.Fatalf("line %d %q: %v", i, lines[i], err)
		}
		var keys []string
		for k := range *m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sorted := slices.Sorted(slices.Values(wantKeys))
		if !slices.Equal(keys, sorted) {
			t.Errorf("line %d keys %v, want %v", i, keys, sorted)
		}
	}
	for k, v := range map[string]any{"time": "2026-10-10T13:55:36+02:00", "type": "request", "path": "/obj/1?x=1",
		"protocol": "HTTP/1.1", "status": 200.0, "bytes_up": 80.0, "bytes_down": 1100.0, "duration_s": 0.0015,
		"upstream_s": 0.001, "user_agent": "curl/8.14", "referer": "http://a.example/", "request_id": "abc"} {
		if req[k] != v {
			t.Errorf("request %s = %#v, want %#v", k, req[k], v)
		}
	}
	for k, v := range map[string]any{"type": "pair", "status": 200.0, "method": "", "duration_s": 2.0,
		"reason": "eof", "err": "bad\x00\ufffd", "engine": "ip"} {
		if pr[k] != v {
			t.Errorf("pair %s = %#v, want %#v", k, pr[k], v)
		}
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "combind"); err == nil || !strings.Contains(err.Error(), `"combind"`) {
		t.Errorf("New with format combind: %v, want an error naming it", err)
	}
}

// TestReopenAfterRotation: lines go to the file at the path once it is
// reopened, and the moved file keeps what it had.
func TestReopenAfterRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := Open(path, Combined)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	l.Log(request())
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	l.Log(request()) // still the moved file, as with logrotate before its postrotate
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	l.Log(request())
	l.Log(request())
	for name, want := range map[string]int{path + ".1": 2, path: 2} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n != want {
			t.Errorf("%s has %d lines, want %d", filepath.Base(name), n, want)
		}
	}
}

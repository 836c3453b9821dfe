// Fuzz targets for the filter's message reader (no head panics it, and the forwarded head never offers h2c) and its request-target check (an accepted path reads the same to every origin).

package filter

import (
	"bufio"
	"bytes"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/splicer/splicer/proxy/httpcore"
)

func FuzzMessage(f *testing.F) {
	f.Add([]byte("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"), true)
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), true)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), false)
	f.Add([]byte("HTTP/1.1 204 No Content\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, in []byte, isRequest bool) {
		m, err := readMessage(bufio.NewReader(bytes.NewReader(in)), isRequest, "GET", httpcore.Limits{MaxHeaderBytes: 8192, MaxHeaders: 64})
		if err != nil {
			return
		}
		if !isRequest {
			return
		}
		// The head forwarded upstream never offers h2c.
		for _, line := range bytes.Split(m.head, []byte("\n")) {
			name, value, ok := bytes.Cut(line, []byte(":"))
			if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Upgrade")) && hasToken([]string{string(value)}, "h2c") {
				t.Fatalf("forwarded head offers h2c: %q", m.head)
			}
		}
	})
}

// FuzzTargetPath: a path the filter accepts reads the same to an origin
// that resolves dot segments, drops ";params" or decodes once more, so the
// path it matched is the one served.
func FuzzTargetPath(f *testing.F) {
	for _, s := range []string{"/a/b", "/admin/users%2f..%2f..%2fok", "/a/..;/b", "/%2e%2e/", "/a%252f", "/x.exe;.txt", "//a//b/", "/a\\b", "http://h/a/../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		p, err := targetPath(target)
		if err != nil {
			return
		}
		for _, r := range readings(p) {
			clean := path.Clean(r)
			if want := strings.TrimSuffix(r, "/"); clean != want && !(clean == "/" && want == "") {
				t.Fatalf("target %q: reading %q resolves to %q", target, r, clean)
			}
			if again, err := url.PathUnescape(r); err == nil && again != r {
				t.Fatalf("target %q: reading %q decodes again to %q", target, r, again)
			}
			if strings.ContainsAny(r, "\\\x00") {
				t.Fatalf("target %q: reading %q has a separator or NUL", target, r)
			}
		}
	})
}

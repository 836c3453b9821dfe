// http-reverse never reuses an upstream connection that holds bytes past a complete response, nor one whose last response had both Content-Length and Transfer-Encoding: kept, they would answer the client's next request.

package httprev_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
)

// strayResponse is what a confused origin sends after a response that has
// no body: a whole response of its own, which a proxy reading it as the
// next request's would relay.
const strayResponse = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Conn: stray\r\n\r\nstray"

// strayOrigin answers GET /head-like paths as a server that gets HEAD,
// 204 and 304 wrong: the head, then strayResponse, in one write or after
// a pause (late). Every other request gets 200 with its connection's
// number in X-Conn and the body "real".
func strayOrigin(tb testing.TB, late bool) string {
	tb.Helper()
	var conns atomic.Int32
	return fwdtest.RawBackend(tb, func(c net.Conn) {
		conn := conns.Add(1)
		testenv.EachRequest(bufio.NewReader(c), func(req *http.Request, _ []byte) bool {
			var head string
			switch {
			case req.Method == http.MethodHead:
				head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
			case req.URL.Path == "/204":
				head = "HTTP/1.1 204 No Content\r\n\r\n"
			case req.URL.Path == "/304":
				head = "HTTP/1.1 304 Not Modified\r\n\r\n"
			case req.URL.Path == "/both":
				// Both lengths: the chunked body is empty, the
				// Content-Length's 5 bytes never come.
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Conn: %d\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", conn)
				return true
			default:
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Conn: %d\r\nContent-Length: 4\r\n\r\nreal", conn)
				return true
			}
			if !late {
				io.WriteString(c, head+strayResponse)
				return true
			}
			io.WriteString(c, head)
			time.Sleep(50 * time.Millisecond)
			io.WriteString(c, strayResponse)
			return true
		})
	})
}

// TestStrayBytesAfterABodilessResponse: an origin that answers HEAD, or
// with 204 or 304, and then sends bytes (a body, or a whole response)
// does not answer the keep-alive client's next request with them: the
// next GET gets its own response, from a new upstream connection.
func TestStrayBytesAfterABodilessResponse(t *testing.T) {
	for _, late := range []bool{false, true} {
		for _, first := range []string{"HEAD /", "GET /204", "GET /304"} {
			name := first + map[bool]string{false: " with the head", true: " after the head"}[late]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := fwdtest.ReverseProxy(t, "copy", "", strayOrigin(t, late))
				c := fwdtest.DialFor(t, f.Addr("rev").String(), 10*time.Second)
				r := bufio.NewReader(c)
				method, path, _ := strings.Cut(first, " ")
				fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: app.example\r\n\r\n", method, path)
				resp, err := http.ReadResponse(r, &http.Request{Method: method})
				if err != nil {
					t.Fatalf("%s: %v", first, err)
				}
				resp.Body.Close()
				if late {
					time.Sleep(300 * time.Millisecond) // the stray bytes are in the proxy's socket
				}
				fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: app.example\r\n\r\n")
				resp, err = http.ReadResponse(r, nil)
				if err != nil {
					t.Fatalf("GET after %s: %v", first, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if conn := resp.Header.Get("X-Conn"); string(body) != "real" || conn != "2" {
					t.Errorf("GET after %s got X-Conn %q and %q, want the GET's own response (\"real\") from a new upstream connection (2)", first, conn, body)
				}
			})
		}
	}
}

// TestBothLengthsCloseTheUpstream: after a response with both
// Content-Length and Transfer-Encoding, whose server may frame its next
// response by either, the next request goes on a new upstream connection.
func TestBothLengthsCloseTheUpstream(t *testing.T) {
	f := fwdtest.ReverseProxy(t, "copy", "", strayOrigin(t, false))
	cl := dialClient(t, f)
	if status, conn, _ := cl.do("GET", "/both"); status != http.StatusOK || conn != "1" {
		t.Fatalf("GET /both: %d from connection %q, want 200 from 1", status, conn)
	}
	if status, conn, body := cl.do("GET", "/"); status != http.StatusOK || conn != "2" || string(body) != "real" {
		t.Errorf("GET / after /both: %d %q from connection %q, want 200 \"real\" from a new one (2)", status, body, conn)
	}
}

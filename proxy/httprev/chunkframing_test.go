// http-reverse relays a chunked request body in its own framing: chunk extensions dropped, sizes in plain hex, trailer fields checked.

package httprev_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

// TestChunkedBodyReframed: a chunked request body's extensions do not
// reach the back end, and its sizes go in plain hex; a trailer line that
// is no field line gets 400, and the back end never gets a whole request.
func TestChunkedBodyReframed(t *testing.T) {
	o := fwdtest.NewRecordingOrigin(t)
	f := fwdtest.ReverseProxy(t, "copy", "", o.Addr)
	addr := f.Addr("rev").String()
	head := "POST /up HTTP/1.1\r\nHost: app.example\r\nTransfer-Encoding: chunked\r\n\r\n"
	resp := fwdtest.Exchange(t, addr, head+"005;name=\"v;x\"\r\nhello\r\n0;last\r\nX-Sum: 1\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chunked POST with extensions: %s, want 200", resp.Status)
	}
	_, body, _ := strings.Cut(o.Raw(), "\r\n\r\n")
	if want := "5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"; body != want {
		t.Errorf("the back end received the body %q, want %q: no extensions, plain sizes", body, want)
	}

	resp = fwdtest.Exchange(t, addr, head+"5\r\nhello\r\n0\r\nX-Sum 1\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a trailer line without a colon: %s, want 400", resp.Status)
	}
	if n := len(o.Requests()); n != 1 {
		t.Errorf("the back end received %d whole requests, want 1 (the first)", n)
	}
}

// http-reverse takes an absolute-form request target's authority as the request's host only after Host's checks, and writes it into Forwarded quoted: a target cannot forge the client's address.

package httprev_test

import (
	"net/http"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

// TestForgedAuthorityRefused: a request whose absolute-form target's
// authority carries quotes and separators, which once went into the
// back end's Forwarded as a second for= element and an invalid Host, is
// refused with 400, and nothing reaches the back end; so are targets of
// another scheme, with userinfo or without a host. A valid one goes on.
func TestForgedAuthorityRefused(t *testing.T) {
	o := fwdtest.NewRecordingOrigin(t)
	f := fwdtest.ReverseProxy(t, "copy", "", o.Addr)
	for _, target := range []string{
		`http://a";for=6.6.6.6,for="1.2.3.4/x`,
		`http://a"b/x`,
		`http://a\b/x`,
		`http:///x`,
		`ftp://app.example/x`,
		`http://user@app.example/x`,
	} {
		resp := fwdtest.Exchange(t, f.Addr("rev").String(), "GET "+target+" HTTP/1.1\r\nHost: app.example\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %s, want 400", target, resp.Status)
		}
	}
	if reqs := o.Requests(); len(reqs) != 0 || o.Raw() != "" {
		t.Fatalf("the back end received %d requests (%q), want none", len(reqs), o.Raw())
	}

	// A valid absolute-form target names the host in place of the Host
	// field (RFC 9112 3.2.2, as nginx does), and the request goes on in
	// origin-form with that host, which Forwarded names once, with the
	// real client.
	resp := fwdtest.Exchange(t, f.Addr("rev").String(), "GET http://app.example/x?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s, want 200", resp.Status)
	}
	reqs := o.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the back end received %d requests, want 1", len(reqs))
	}
	req := reqs[0]
	if req.RequestURI != "/x?q=1" || req.Host != "app.example" {
		t.Errorf("the back end received target %q, Host %q; want /x?q=1 and app.example", req.RequestURI, req.Host)
	}
	want := `for=127.0.0.1;proto=http;host="app.example"`
	if got := req.Header.Values("Forwarded"); len(got) != 1 || got[0] != want {
		t.Errorf("Forwarded = %q, want [%q]", got, want)
	}
}

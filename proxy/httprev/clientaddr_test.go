// http-reverse drops the fields an untrusted client could name another client's address or port in, and keeps a trusted proxy's.

package httprev_test

import (
	"net/http"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

// TestClientAddressFieldsDropped: X-Real-IP, True-Client-IP,
// X-Forwarded-Port and their kin from an untrusted client do not reach
// the back end (as its Forwarded and X-Forwarded-For do not); from a
// trusted proxy (trusted_proxies) they do.
func TestClientAddressFieldsDropped(t *testing.T) {
	o := fwdtest.NewRecordingOrigin(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: trusting, listen: '127.0.0.1:0', proxy: http-reverse, http: {trusted_proxies: ['127.0.0.1']},
     pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
`, o.Addr)
	f := fwdtest.Start(t, cfg.Listeners...)
	fields := []string{"X-Real-IP", "True-Client-IP", "X-Forwarded-Port", "X-Forwarded-Server", "X-Client-IP", "X-Cluster-Client-IP"}
	raw := "GET / HTTP/1.1\r\nHost: app.example\r\n"
	for _, name := range fields {
		raw += name + ": 203.0.113.66\r\n"
	}
	raw += "\r\n"
	for i, listener := range []string{"rev", "trusting"} {
		if resp := fwdtest.Exchange(t, f.Addr(listener).String(), raw); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s, want 200", listener, resp.Status)
		}
		req := o.Requests()[i]
		for _, name := range fields {
			got := req.Header.Get(name)
			switch {
			case listener == "rev" && got != "":
				t.Errorf("an untrusted client's %s reached the back end: %q", name, got)
			case listener == "trusting" && got != "203.0.113.66":
				t.Errorf("a trusted proxy's %s reached the back end as %q, want it kept", name, got)
			}
		}
	}
}

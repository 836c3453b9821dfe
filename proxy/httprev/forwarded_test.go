// Tests of the forwarding fields http-reverse adds, written in the connection's memory.

package httprev

import (
	"net/http"
	"testing"
)

// TestAddForwardedEachRequest adds the forwarding fields to two requests in
// turn through one connection's memory, as Serve does: each gets its own
// client and host, an IPv6 node quoted, a request without Host none.
func TestAddForwardedEachRequest(t *testing.T) {
	var fw forwarding
	for _, c := range []struct{ ip, host, want string }{
		{"10.99.1.2", "app.example", `for=10.99.1.2;proto=http;host="app.example"`},
		{"fd99:1::2", "", `for="[fd99:1::2]";proto=http`},
		{"192.0.2.7", "a.example:8080", `for=192.0.2.7;proto=http;host="a.example:8080"`},
	} {
		req := &http.Request{Host: c.host, Header: http.Header{"Forwarded": {"for=203.0.113.66"}}}
		addForwarded(req, c.ip, false, &fw)
		if got := req.Header["Forwarded"]; len(got) != 1 || got[0] != c.want {
			t.Errorf("Forwarded = %q, want %q", got, c.want)
		}
		if got := req.Header.Get("X-Forwarded-For"); got != c.ip {
			t.Errorf("X-Forwarded-For = %q, want %q", got, c.ip)
		}
	}
}

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
		if err := addForwarded(req, c.ip, false, &fw); err != nil {
			t.Fatal(err)
		}
		if got := req.Header["Forwarded"]; len(got) != 1 || got[0] != c.want {
			t.Errorf("Forwarded = %q, want %q", got, c.want)
		}
		if got := req.Header.Get("X-Forwarded-For"); got != c.ip {
			t.Errorf("X-Forwarded-For = %q, want %q", got, c.ip)
		}
	}
}

// TestForwardedHostQuoted: a host goes into Forwarded as a quoted string
// with its quotes and backslashes escaped, so that it cannot close the
// string and add elements of its own; one with a control character, which
// no quoted string carries, is refused. (ReadRequest refuses such hosts
// before; this is the second wall.)
func TestForwardedHostQuoted(t *testing.T) {
	var fw forwarding
	for _, c := range []struct{ host, want string }{
		{`a";for=6.6.6.6,for="1.2.3.4`, `for=10.99.1.2;proto=http;host="a\";for=6.6.6.6,for=\"1.2.3.4"`},
		{`a\b`, `for=10.99.1.2;proto=http;host="a\\b"`},
	} {
		req := &http.Request{Host: c.host, Header: http.Header{}}
		if err := addForwarded(req, "10.99.1.2", false, &fw); err != nil {
			t.Fatalf("host %q: %v", c.host, err)
		}
		if got := req.Header["Forwarded"]; len(got) != 1 || got[0] != c.want {
			t.Errorf("host %q: Forwarded = %q, want %q", c.host, got, c.want)
		}
	}
	req := &http.Request{Host: "a\x01b", Header: http.Header{}}
	if err := addForwarded(req, "10.99.1.2", false, &fw); err == nil {
		t.Errorf("host with a control character: Forwarded = %q, want the request refused", req.Header["Forwarded"])
	}
}

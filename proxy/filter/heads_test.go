// Path matching options (case, ;params) and the canonical re-serialization of the heads the filter forwards.

package filter

import "testing"

func TestBlockedPathOptions(t *testing.T) {
	pats := []string{"/admin", "/admin/*", "*.exe"}
	for _, tc := range []struct {
		path                    string
		ignoreCase, stripParams bool
		blocked                 bool
	}{
		{"/admin", false, false, true},
		{"/ADMIN", false, false, false},
		{"/ADMIN", true, false, true},
		{"/admin;x=1", false, false, false},
		{"/admin;x=1", false, true, true},
		{"/Admin;jsessionid=1/panel", true, true, true},
		{"/files/SETUP.EXE", true, false, true},
		{"/files/setup.exe;v=2", false, true, true},
		{"/public", true, true, false},
	} {
		_, got := blockedPath(pats, tc.path, tc.ignoreCase, tc.stripParams)
		if got != tc.blocked {
			t.Errorf("%q (ignore case %v, strip params %v): blocked %v, want %v", tc.path, tc.ignoreCase, tc.stripParams, got, tc.blocked)
		}
	}
}

func TestCanonicalHead(t *testing.T) {
	for in, want := range map[string]string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\n":                               "GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\nHost:x\nX-A:  1 \t\n\n":                          "GET /a HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n":              "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
		"POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:chunked\r\n\r\n": "POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		if got := string(canonicalHead([]byte(in))); got != want {
			t.Errorf("canonicalHead(%q) = %q, want %q", in, got, want)
		}
	}
}

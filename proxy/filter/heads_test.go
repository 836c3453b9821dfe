// Path matching (every reading of a path an origin may make), the request targets refused, and the canonical re-serialization of the heads the filter forwards.

package filter

import "testing"

func TestBlockedPathReadings(t *testing.T) {
	pats := []string{"/admin", "/admin/*", "*.exe", "/api/*/secret"}
	for path, blocked := range map[string]bool{
		"/admin":                    true,
		"/admin/":                   true,
		"/ADMIN":                    true,
		"/admin;x=1":                true,
		"/Admin;jsessionid=1/panel": true,
		"/admin/users/list":         true,
		"//admin//users":            true,
		"/admin./users":             true,
		"/files/SETUP.EXE":          true,
		"/files/setup.exe;v=2":      true,
		"/x.exe;.txt":               true,
		"/x.exe.":                   true,
		"/x.exe /":                  true,
		"/x.exe/info":               true,
		"/api/v1/secret":            true,
		"/api/v1/;x/secret":         true,
		"/api/v1/secret/":           true,
		"/public":                   false,
		"/administrator":            false,
		"/api/v1/public":            false,
		"/api/v1/v2/secret":         false,
		"/files/setup.exe.txt":      false,
		"/":                         false,
	} {
		if _, got := blockedPath(pats, path); got != blocked {
			t.Errorf("%q: blocked %v, want %v", path, got, blocked)
		}
	}
}

func TestTargetPath(t *testing.T) {
	for target, want := range map[string]string{
		"/a/b?x=/../y":            "/a/b",
		"/%61dmin/x":              "/admin/x",
		"http://h:80/admin/x?q=1": "/admin/x",
		"http://h?q":              "/",
		"/a;p=1/b":                "/a;p=1/b",
		"/a%20b/c.d":              "/a b/c.d",
		"/caf%C3%A9":              "/café",
		"*":                       "*",
	} {
		if got, err := targetPath(target); err != nil || got != want {
			t.Errorf("targetPath(%q) = %q, %v; want %q", target, got, err, want)
		}
	}
	for _, target := range []string{
		"/admin%2fx", "/admin%2Fx", "/admin\\x", "/admin%5cx", "/a%00b", "/a%0ab", "/a%7f", "/a#b",
		"/a/../b", "/a/./b", "/..", "/a/%2e%2e/b", "/a/%2E/b", "/a/..;x/b", "/a/.../b", "/a/.. /b",
		"/a%252fb", "/%c0%af", "/a%zz", "http://h/a/../b",
	} {
		if p, err := targetPath(target); err == nil {
			t.Errorf("targetPath(%q) = %q, want it refused", target, p)
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

// ValidateHead refuses the heads that let two parsers frame a message differently, and passes ordinary ones; ChunkSize reads only hex digits.

package httpcore

import "testing"

func TestValidateHead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		head    string
		request bool
		bad     bool
	}{
		{"plain GET", "GET / HTTP/1.1\r\nHost: a.example\r\nUser-Agent: x\r\n\r\n", true, false},
		{"absolute URI with port", "GET http://a.example:8080/x HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", true, false},
		{"IPv6 host", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", true, false},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", true, false},
		{"space before colon", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", true, true},
		{"tab before colon", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding\t: chunked\r\n\r\n", true, true},
		{"obs-fold", "POST / HTTP/1.1\r\nHost: a\r\nX: 1\r\n Transfer-Encoding: chunked\r\n\r\n", true, true},
		{"obs-fold in a response", "HTTP/1.1 200 OK\r\nX: 1\r\n\tmore\r\n\r\n", false, true},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"no Host in 1.1", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", true, true},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", true, true},
		{"Host with a quote", "GET / HTTP/1.1\r\nHost: a\",for=203.0.113.66;x=\"\r\n\r\n", true, true},
		{"Host with a space", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", true, true},
		{"field name not a token", "GET / HTTP/1.1\r\nHost: a\r\nX(y): 1\r\n\r\n", true, true},
		{"line without colon", "GET / HTTP/1.1\r\nHost: a\r\nnonsense\r\n\r\n", true, true},
		{"response with CL and TE passes here", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false, false},
	} {
		err := ValidateHead([]byte(tc.head), tc.request)
		if (err != nil) != tc.bad {
			t.Errorf("%s: err %v, want refused=%v", tc.name, err, tc.bad)
		}
	}
}

func TestChunkSize(t *testing.T) {
	for line, want := range map[string]int64{"0": 0, "1a": 26, "FF;ext=1": 255, "10 ;x": 16, "7fffffffffffff": 1<<55 - 1} {
		if got, err := ChunkSize(line); err != nil || got != want {
			t.Errorf("ChunkSize(%q) = %d, %v; want %d", line, got, err, want)
		}
	}
	for _, line := range []string{"", "+5", "-1", "0x10", "g", " 5", "1234567890abcdef0", "5 5"} {
		if n, err := ChunkSize(line); err == nil {
			t.Errorf("ChunkSize(%q) = %d, want an error", line, n)
		}
	}
}

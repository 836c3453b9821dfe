// A hand-written parser for the common request and response heads, in one pass with ValidateHead's checks; anything else goes to net/http.

package httpcore

// Why not net/http alone: the style prefers a well-kept library unless
// splicing needs control it hides, and here what it hides is the cost.
// http.ReadRequest and http.ReadResponse read through a textproto.Reader
// and allocate per line; with ValidateHead's own pass over the head that
// was ~3.5 µs and 22 allocations of a small request's ~30 µs in the proxy.
// This parser takes only heads of the common shape (origin-form target of
// plain characters, HTTP/1.0 or 1.1, CRLF lines, printable ASCII values,
// at most one Host and one Content-Length, no Transfer-Encoding, Trailer
// or Pragma) and builds what net/http would from them, sharing one string
// for every name and value. Whatever else, valid or not, it declines:
// ValidateHead and net/http then parse it as before and give the same
// answer and the same errors. FuzzFastParse holds it to net/http's result.

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"unsafe"
)

// fastFields is what fastParse learned of a head besides its fields.
type fastFields struct {
	start      string // the start line
	hosts      int
	host       string // the first Host's value
	lengths    int
	length     int64 // Content-Length's value, when lengths is 1
	connection []string
}

// fastParse splits a complete head (start line, fields, empty line, CRLF
// line ends) into its start line and fields, checking what ValidateHead
// checks of every field line; ok false: not a common head. A request's
// Host goes to f only. The header map and its values are mem's, if not nil.
func fastParse(head []byte, isRequest bool, mem *headerMem) (h http.Header, f fastFields, ok bool) {
	n := len(head)
	if n < 4 || string(head[n-4:]) != "\r\n\r\n" {
		return nil, f, false
	}
	s := mem.text(head[:n-2]) // every line with its CRLF
	end := strings.IndexByte(s, '\n')
	if end < 1 || s[end-1] != '\r' || !printable(s[:end-1]) {
		return nil, f, false
	}
	f.start = s[:end-1]
	h, vals := mem.take(s[end+1:])
	for rest := s[end+1:]; rest != ""; {
		end := strings.IndexByte(rest, '\n')
		if end < 1 || rest[end-1] != '\r' {
			return nil, f, false // a bare LF
		}
		line := rest[:end-1]
		rest = rest[end+1:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return nil, f, false // obs-fold, no name, whitespace before the colon, a name that is no token
		}
		value := trimBlanks(line[colon+1:])
		if !printable(value) {
			return nil, f, false
		}
		key := textproto.CanonicalMIMEHeaderKey(line[:colon])
		switch key {
		case "Host":
			if f.hosts++; f.hosts == 1 {
				f.host = value
			}
		case "Content-Length":
			if f.lengths++; f.lengths > 1 {
				return nil, f, false
			}
			var ok bool
			if f.length, ok = parseLength(value); !ok {
				return nil, f, false
			}
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, f, false
		}
		if key == "Host" && isRequest {
			continue // net/http keeps it in Request.Host only
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, value)
		} else {
			// Each value in vals, which may move as it grows: the
			// fields already in h keep the old array.
			vals = append(vals, value)
			k := len(vals)
			h[key] = vals[k-1 : k : k]
		}
		if key == "Connection" {
			f.connection = h[key]
		}
	}
	mem.keep(vals)
	return h, f, true
}

// headerMem is a header map, an array for its values and a buffer for the
// head's text, which every name and value string shares, kept from one
// head to the next by a Conn whose proxy holds no request or response, nor
// any of their strings, past its exchange (Conn.Reuse). Building a head in
// the last one's memory leaves a small exchange with no allocation of its
// own, and so without garbage collections: at 60k requests/s the head's
// text alone, ~370 bytes per exchange, brought one every 125 ms with the
// 4 MB minimum heap, each stopping the world for up to a millisecond on a
// busy machine, which was the proxy's p99.
type headerMem struct {
	h    http.Header
	vals []string
	buf  []byte
}

// keptFields bounds the header maps and value arrays a headerMem keeps.
const keptFields = 32

// keptText bounds the head text a headerMem keeps; a longer head gets a
// string of its own.
const keptText = 8 << 10

// text returns head as a string: a copy in m's buffer, which the next
// head overwrites, or a string of its own when m is nil or head is longer
// than keptText.
func (m *headerMem) text(head []byte) string {
	if m == nil || len(head) > keptText || len(head) == 0 {
		return string(head)
	}
	m.buf = append(m.buf[:0], head...)
	return unsafe.String(unsafe.SliceData(m.buf), len(m.buf))
}

// take returns an empty header map and an empty array for the values of
// fields, the field lines of a head: m's, cleared, or new ones sized for
// fields when m is nil (a Conn that reuses memory does not count them).
func (m *headerMem) take(fields string) (http.Header, []string) {
	if m == nil {
		n := strings.Count(fields, "\n")
		return make(http.Header, n), make([]string, 0, n)
	}
	if m.h == nil || len(m.h) > keptFields {
		// A map grown by an unusual head is not kept: clearing it
		// would cost every later head as much.
		m.h = make(http.Header)
	}
	clear(m.h)
	if cap(m.vals) > keptFields {
		m.vals = nil
	}
	clear(m.vals[:cap(m.vals)]) // no string of the last head stays reachable through it
	return m.h, m.vals[:0]
}

// keep keeps the array vals grew into for the next head, if m is not nil.
func (m *headerMem) keep(vals []string) {
	if m != nil {
		m.vals = vals
	}
}

// exchangeMem is the memory of a Conn's last parsed request and response
// (see headerMem), for its next ones.
type exchangeMem struct {
	req      requestAlloc
	resp     http.Response
	reqHead  headerMem
	respHead headerMem
}

// printable reports whether s is only printable ASCII and HTAB.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c > '~' {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length value as net/http does (decimal
// digits, fitting 63 bits), short enough not to overflow.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// fastProto is the version of a start line's protocol, when 1.0 or 1.1.
func fastProto(p string) (minor int, ok bool) {
	switch p {
	case "HTTP/1.1":
		return 1, true
	case "HTTP/1.0":
		return 0, true
	}
	return 0, false
}

// containsToken reports whether a comma-separated list among values holds
// token, ignoring case (httpguts.HeaderValuesContainsToken).
func containsToken(values []string, token string) bool {
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(item, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// fastRequest parses a common request head as http.ReadRequest would, with
// ValidateHead's checks; ok false sends the caller to those two. The
// request is built in mem's memory if mem is not nil.
func fastRequest(head []byte, mem *exchangeMem) (*http.Request, bool) {
	var hm *headerMem
	if mem != nil {
		hm = &mem.reqHead
	}
	h, f, ok := fastParse(head, true, hm)
	if !ok {
		return nil, false
	}
	method, rest, _ := strings.Cut(f.start, " ")
	target, proto, _ := strings.Cut(rest, " ")
	minor, ok := fastProto(proto)
	if !ok || !isToken(method) || method == "CONNECT" {
		return nil, false
	}
	var r *requestAlloc
	if mem != nil {
		r = &mem.req
	} else {
		r = new(requestAlloc)
	}
	if !fastURL(&r.url, target) {
		return nil, false
	}
	// ValidateHead's framing checks (no Transfer-Encoding came this far).
	if f.hosts > 1 || f.hosts == 0 && minor == 1 || !validHost(f.host) {
		return nil, false
	}
	closing := containsToken(f.connection, "close")
	if minor == 0 && !closing {
		closing = !containsToken(f.connection, "keep-alive")
	}
	r.req = http.Request{
		Method: method, URL: &r.url, Proto: proto, ProtoMajor: 1, ProtoMinor: minor,
		Header: h, Body: http.NoBody, ContentLength: f.length, Close: closing,
		Host: f.host, RequestURI: target,
	}
	return &r.req, true
}

// requestAlloc is a request and its URL in one allocation.
type requestAlloc struct {
	req http.Request
	url url.URL
}

// fastURL parses an origin-form target into u as url.ParseRequestURI would, when
// its path needs no escaping and its query has no fragment mark.
func fastURL(u *url.URL, target string) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		if !plainPath(path[i]) {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c <= ' ' || c > '~' || c == '#' {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	return true
}

// plainPath reports whether c stands for itself in a URL path: one that
// url.URL.EscapedPath gives back as it is.
func plainPath(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.~$&+,/:;=@", c) >= 0
}

// fastResponse parses a common response head to req, one with a
// Content-Length and a body, as http.ReadResponse would, with
// ValidateHead's checks; ok false sends the caller to those two. The
// response is built in mem's memory if mem is not nil.
func fastResponse(head []byte, req *http.Request, mem *exchangeMem) (*http.Response, bool) {
	var hm *headerMem
	if mem != nil {
		hm = &mem.respHead
	}
	h, f, ok := fastParse(head, false, hm)
	if !ok || f.lengths != 1 || req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	proto, status, _ := strings.Cut(f.start, " ")
	minor, ok := fastProto(proto)
	if !ok || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return nil, false
	}
	code := 0
	for i := range 3 {
		c := status[i]
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	closing := containsToken(f.connection, "close")
	if minor == 0 {
		closing = closing || !containsToken(f.connection, "keep-alive")
	} else if closing {
		delete(h, "Connection")
	}
	var resp *http.Response
	if mem != nil {
		resp = &mem.resp
	} else {
		resp = new(http.Response)
	}
	*resp = http.Response{
		Status: status, StatusCode: code, Proto: proto, ProtoMajor: 1, ProtoMinor: minor,
		Header: h, Body: http.NoBody, ContentLength: f.length, Close: closing, Request: req,
	}
	return resp, true
}

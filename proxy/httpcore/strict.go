// Strict HTTP/1.1 message checks (RFC 9112) that net/http's parsers leave to the server: what a proxy must refuse so that it and the next hop cannot frame a message differently (request smuggling).

package httpcore

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ValidateHead checks a raw message head (start line, fields, empty line)
// as it arrived, before net/http parses it; net/http is lenient where a
// proxy must not be. It returns why the head must be refused, or nil:
//   - whitespace between a field name and its colon (RFC 9112 §5.1)
//   - obs-fold, a field line starting with SP or HTAB (§5.2)
//   - a field name that is not a token (RFC 9110 §5.1)
//   - in a request: both Content-Length and Transfer-Encoding (§6.1), no
//     Host or several Host fields in HTTP/1.1 (§3.2), a Host with
//     characters no authority has, Transfer-Encoding in HTTP/1.0 (§6.1)
func ValidateHead(head []byte, isRequest bool) error {
	rest := bytes.TrimRight(head, "\r\n")
	start, rest, _ := bytes.Cut(rest, []byte("\n"))
	var host []byte // the first Host field's value
	hosts := 0
	var cl, te bool
	var codings [][]byte // the Transfer-Encoding fields' values
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errors.New("obsolete line folding (a field line starting with whitespace)")
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return fmt.Errorf("field line without a name and colon: %q", truncate(line))
		}
		name := line[:colon]
		if c := name[len(name)-1]; c == ' ' || c == '\t' {
			return fmt.Errorf("whitespace between field name %q and its colon", bytes.TrimSpace(name))
		}
		if !isToken(name) {
			return fmt.Errorf("field name %q is not a token", truncate(name))
		}
		switch {
		case equalFold(name, "Host"):
			if hosts++; hosts == 1 {
				host = bytes.Trim(line[colon+1:], " \t")
			}
		case equalFold(name, "Content-Length"):
			cl = true
		case equalFold(name, "Transfer-Encoding"):
			te = true
			codings = append(codings, line[colon+1:])
		}
	}
	if !isRequest {
		return nil
	}
	if err := checkRequestFraming(start, host, hosts, cl, te); err != nil {
		return err
	}
	return checkCodings(codings)
}

// ErrUnsupportedCoding is a request whose Transfer-Encoding is other than
// chunked alone (gzip, chunked, say): answered 501, as RFC 9112 6.1 asks
// of a recipient that does not understand a coding.
var ErrUnsupportedCoding = errors.New("transfer coding not supported (only chunked is)")

// checkCodings refuses Transfer-Encoding values other than chunked alone.
func checkCodings(values [][]byte) error {
	if len(values) == 0 {
		return nil
	}
	all := bytes.Join(values, []byte(","))
	list := bytes.Split(all, []byte(","))
	if len(list) == 1 && equalFold(bytes.Trim(list[0], " \t"), "chunked") {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnsupportedCoding, truncate(bytes.TrimSpace(all)))
}

// checkRequestFraming is ValidateHead's checks of a request's start line
// and framing fields.
func checkRequestFraming(start, host []byte, hosts int, cl, te bool) error {
	if cl && te {
		return errors.New("request has both Content-Length and Transfer-Encoding")
	}
	proto := bytes.TrimSuffix(start[bytes.LastIndexByte(start, ' ')+1:], []byte("\r"))
	if te && string(proto) == "HTTP/1.0" {
		return errors.New("Transfer-Encoding in an HTTP/1.0 request")
	}
	if hosts > 1 {
		return errors.New("more than one Host field")
	}
	if hosts == 0 && string(proto) == "HTTP/1.1" {
		return errors.New("HTTP/1.1 request without Host")
	}
	if hosts == 1 && !validHost(host) {
		return fmt.Errorf("invalid Host %q", truncate(host))
	}
	return nil
}

// checkTarget checks what a parsed request's target says besides its
// path. An absolute-form target (GET http://host/path) names the request's
// host in place of its Host field (RFC 9112 3.2.2; net/http sets
// Request.Host from it), so its authority gets Host's checks: without
// them a target's quotes and separators went into Forwarded, and an
// invalid Host upstream. Its scheme must be http or https, and it may
// carry no userinfo (RFC 9110 4.2.4 asks a recipient to treat one as an
// error). nginx takes such a target the same way: its host wins over
// Host, is validated, and the request goes on in origin-form
// (requestHead writes req.URL.RequestURI()). CONNECT's authority-form
// target gets Host's checks too.
func checkTarget(req *http.Request) error {
	u := req.URL
	absolute := req.Method != http.MethodConnect && req.RequestURI != "*" && !strings.HasPrefix(req.RequestURI, "/")
	switch {
	case !absolute && req.Method != http.MethodConnect:
		return nil
	case absolute && !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return fmt.Errorf("absolute-form target with scheme %q (only http and https are)", truncate([]byte(u.Scheme)))
	case u.User != nil:
		return errors.New("request target with userinfo")
	case u.Host == "":
		return errors.New("request target without a host")
	case !validHost(u.Host):
		return fmt.Errorf("invalid host %q in the request target", truncate([]byte(u.Host)))
	}
	return nil
}

// hasField reports whether head, a message head that ValidateHead
// passed, has a field named name (ASCII case ignored).
func hasField(head []byte, name string) bool {
	_, rest, _ := bytes.Cut(head, []byte("\n")) // past the start line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if colon := bytes.IndexByte(line, ':'); colon > 0 && equalFold(line[:colon], name) {
			return true
		}
	}
	return false
}

// equalFold reports whether b is s, ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// isToken reports whether b is an RFC 9110 token.
func isToken[T string | []byte](b T) bool {
	for i := range len(b) {
		if !tokenChar[b[i]] {
			return false
		}
	}
	return len(b) > 0
}

// tokenChar holds the characters of RFC 9110 tokens: a table, since every
// field name of every head is checked (a search of the delimiters per
// character was a quarter of writing a small response's head).
var tokenChar = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

// validHost reports whether h can be a URI authority's host[:port]
// (RFC 3986: reg-name, IPv4 or a bracketed IPv6 literal): no whitespace,
// quotes, commas, semicolons or other characters that would let it escape
// a header it is copied into (Forwarded: host="...").
func validHost[T string | []byte](h T) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'*+=:[]%", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// ChunkSize parses a chunk-size line's hexadecimal size, ignoring any
// chunk extension (which must hold no control character but HTAB: CopyChunked
// drops it, but another parser may end the line at a bare CR). Only hex
// digits are a size: strconv would also take a sign, which another parser
// may read differently.
func ChunkSize(line string) (int64, error) {
	s, ext, _ := strings.Cut(line, ";")
	for i := 0; i < len(ext); i++ {
		if c := ext[i]; c < ' ' && c != '\t' || c == 0x7f {
			return 0, errBadChunk
		}
	}
	s = strings.TrimRight(s, " \t\r\n")
	if s == "" || len(s) > 15 {
		return 0, errBadChunk
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, errBadChunk
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}

// Message framing: where a body ends, the heads the proxy writes, hop-by-hop headers, and streaming chunked bodies.

package httpcore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// bodyKind says how a message's body is delimited.
type bodyKind uint8

const (
	bodyNone       bodyKind = iota
	bodyLength              // Content-Length bytes: spliced with a byte limit
	bodyChunked             // chunked: streamed in control mode, parsed to find its end
	bodyUntilClose          // no length: everything until the upstream closes
)

func requestBody(req *http.Request) bodyKind {
	switch {
	case isChunked(req.TransferEncoding):
		return bodyChunked
	case req.ContentLength > 0:
		return bodyLength
	}
	return bodyNone
}

// responseBody follows RFC 9112 section 6.3.
func responseBody(req *http.Request, resp *http.Response) bodyKind {
	switch {
	case req.Method == http.MethodHead, resp.StatusCode == http.StatusNoContent,
		resp.StatusCode == http.StatusNotModified, resp.StatusCode < 200:
		return bodyNone
	case isChunked(resp.TransferEncoding):
		return bodyChunked
	case resp.ContentLength == 0:
		return bodyNone
	case resp.ContentLength > 0:
		return bodyLength
	}
	return bodyUntilClose
}

func isChunked(te []string) bool { return len(te) > 0 && te[len(te)-1] == "chunked" }

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 section 7.6.1); the proxy drops them and sets its own framing.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Upgrade", "Transfer-Encoding", "Content-Length"}

// StripHopByHop removes the hop-by-hop headers of h, including those the
// Connection header names.
func StripHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name) // h.Del without canonicalizing names that are canonical: every request pays it
	}
}

// requestHead is the head the proxy sends upstream for req: origin-form
// target, Host first, hop-by-hop headers replaced by the proxy's own
// framing and connection handling. The caller may have changed req.Header
// (forwarding headers) before.
func requestHead(req *http.Request, upgrade string) []byte {
	return appendRequestHead(nil, req, upgrade, req.Close)
}

// appendRequestHead appends requestHead's head to b, written directly:
// cloning, stripping and sorting the header map through http.Header.Write
// was a measurable share of a small request's cost.
// closeUp asks the server to close the connection after its response:
// Connection is hop-by-hop, and a proxy that keeps upstream connections
// for other clients asks for keep-alive whatever the client asked for
// (closeUpstream).
func appendRequestHead(b []byte, req *http.Request, upgrade string, closeUp bool) []byte {
	var extra [3]headField
	framing := extra[:0]
	switch requestBody(req) {
	case bodyLength:
		framing = append(framing, headField{name: "Content-Length", length: req.ContentLength})
	case bodyChunked:
		framing = append(framing, headField{name: "Transfer-Encoding", value: "chunked"})
	}
	switch {
	case upgrade != "":
		framing = append(framing, headField{name: "Connection", value: "Upgrade"}, headField{name: "Upgrade", value: upgrade})
	case closeUp:
		framing = append(framing, headField{name: "Connection", value: "close"})
	case req.ProtoMinor == 0:
		framing = append(framing, headField{name: "Connection", value: "keep-alive"})
	}
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1."...)
	b = strconv.AppendInt(b, int64(req.ProtoMinor), 10)
	b = append(b, "\r\n"...)
	if req.Host != "" {
		// An HTTP/1.0 request may come without one (1.1 may not: 400);
		// it goes on without one, as it came: an empty Host is refused
		// as invalid (nginx answers 400).
		b = append(b, "Host: "...)
		b = append(b, req.Host...)
		b = append(b, "\r\n"...)
	}
	b = appendFields(b, req.Header, true, framing)
	return append(b, "\r\n"...)
}

// responseHead is the head the proxy sends the client for resp.
func responseHead(req *http.Request, resp *http.Response, kind bodyKind, keep bool) []byte {
	return appendResponseHead(nil, req, resp, kind, keep)
}

// appendResponseHead appends responseHead's head to b.
func appendResponseHead(b []byte, req *http.Request, resp *http.Response, kind bodyKind, keep bool) []byte {
	var extra [2]headField
	framing := extra[:0]
	switch kind {
	case bodyLength:
		framing = append(framing, headField{name: "Content-Length", length: resp.ContentLength})
	case bodyChunked:
		framing = append(framing, headField{name: "Transfer-Encoding", value: "chunked"})
	case bodyNone:
		// A HEAD or 304 response's length describes the entity: kept.
		if length := resp.Header.Get("Content-Length"); length != "" && resp.StatusCode != http.StatusNoContent && resp.StatusCode >= 200 {
			framing = append(framing, headField{name: "Content-Length", value: length})
		}
	}
	switch {
	case !keep:
		framing = append(framing, headField{name: "Connection", value: "close"})
	case req.ProtoMinor == 0:
		framing = append(framing, headField{name: "Connection", value: "keep-alive"})
	}
	// The proxy's own version, whatever the upstream's (RFC 9110 6.2),
	// as nginx and HAProxy send: an HTTP/1.0 answer passed on as such
	// would tell an HTTP/1.1 client the connection closes after it,
	// while the proxy keeps it for the next request.
	b = append(b, "HTTP/1.1 "...)
	b = append(b, statusText(resp)...)
	b = append(b, "\r\n"...)
	b = appendFields(b, resp.Header, false, framing)
	return append(b, "\r\n"...)
}

// headField is a header field to write: a header map's values, or one
// value, or a length (length >= 0 when value and values are empty).
type headField struct {
	name   string
	values []string
	value  string
	length int64
}

// appendFields appends the fields of h that are not hop-by-hop (nor named
// by its Connection field, nor, in a request, Expect: the proxy answers
// 100-continue itself) and the proxy's framing fields, sorted by name,
// each line as http.Header.Write writes it.
func appendFields(b []byte, h http.Header, request bool, framing []headField) []byte {
	var arr [16]headField // enough for most heads: zeroing a larger array costs every head
	fields := arr[:0]
	conn := h["Connection"]
	for name, values := range h {
		if isHopByHop(name) || (request && name == "Expect") || listsToken(conn, name) {
			continue
		}
		fields = append(fields, headField{name: name, values: values})
	}
	fields = append(fields, framing...)
	slices.SortFunc(fields, func(x, y headField) int { return strings.Compare(x.name, y.name) })
	for i := range fields {
		f := &fields[i]
		if !isToken(f.name) {
			continue // as http.Header.Write: no name that could break the head
		}
		switch {
		case f.values != nil:
			for _, v := range f.values {
				b = appendField(b, f.name, v)
			}
		case f.value != "":
			b = appendField(b, f.name, f.value)
		default:
			b = append(b, f.name...)
			b = append(b, ": "...)
			b = strconv.AppendInt(b, f.length, 10)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// appendField appends one field line; CR and LF in v become spaces and
// surrounding blanks go, as http.Header.Write does.
func appendField(b []byte, name, v string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	v = trimBlanks(v)
	if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	b = append(b, v...)
	return append(b, "\r\n"...)
}

// trimBlanks is strings.Trim(v, " \t") without building a set of the two
// characters for every field of every head.
func trimBlanks(v string) string {
	for v != "" && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for v != "" && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// isHopByHop reports whether name (canonical) is in hopByHop.
func isHopByHop(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Upgrade", "Transfer-Encoding", "Content-Length":
		return true
	}
	return false
}

// listsToken reports whether the Connection field values conn list name.
func listsToken(conn []string, name string) bool {
	for _, v := range conn {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), name) {
				return true
			}
		}
	}
	return false
}

// statusText is the status line after the version, e.g. "200 OK".
func statusText(resp *http.Response) string {
	if s := strings.TrimSpace(resp.Status); s != "" {
		return s
	}
	return strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
}

// maxChunkLine bounds a chunk-size line or trailer line.
const maxChunkLine = 4096

var errBadChunk = errors.New("malformed chunked body")

// ErrBodyTooLarge is a chunked body that grew past the bound
// CopyChunkedMax was given.
var ErrBodyTooLarge = errors.New("chunked body larger than its bound")

// CopyChunked copies one chunked body from src to dst, parsing it to find
// where it ends, each chunk-size line as the sender wrote it (extensions
// included): for the filter, which passes messages on as they came. Line
// ends are written as CRLF whatever the sender used (RFC 9112 2.2 lets a
// recipient take a bare LF), and the trailer's well formed fields only
// (copyTrailer), so that the next hop reads the same framing.
func CopyChunked(dst io.Writer, src *bufio.Reader) error { return copyChunked(dst, src, 0, false) }

// CopyChunkedMax is CopyChunked for a body whose chunks may carry at most
// max bytes of data (0: no bound): the chunk that would take it past max
// is not copied, and the error is ErrBodyTooLarge.
func CopyChunkedMax(dst io.Writer, src *bufio.Reader, max int64) error {
	return copyChunked(dst, src, max, false)
}

// relayChunked is CopyChunkedMax in the proxy's own framing, as
// http-reverse and http-forward relay a chunked body either way: each
// chunk size in lowercase hex without leading zeros or chunk extensions
// (RFC 9112 7.1.1 lets a recipient ignore the extensions it does not
// understand, and none is understood), so that no extension, nor a size
// another parser reads differently, reaches the next hop.
func relayChunked(dst io.Writer, src *bufio.Reader, max int64) error {
	return copyChunked(dst, src, max, true)
}

// copyChunked copies one chunked body, with its sizes in the proxy's
// framing when reframe is set (relayChunked), else as they came.
func copyChunked(dst io.Writer, src *bufio.Reader, max int64, reframe bool) error {
	tp := src
	var total int64
	var sizeLine []byte
	for {
		line, err := readChunkLine(tp)
		if err != nil {
			return err
		}
		size, err := ChunkSize(line)
		if err != nil {
			return err
		}
		if total += size; max > 0 && total > max {
			return fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, max)
		}
		if reframe {
			sizeLine = strconv.AppendInt(sizeLine[:0], size, 16)
		} else {
			sizeLine = append(sizeLine[:0], line...)
		}
		if _, err := dst.Write(append(sizeLine, "\r\n"...)); err != nil {
			return err
		}
		if size == 0 {
			return copyTrailer(dst, tp)
		}
		if _, err := io.CopyN(dst, src, size); err != nil {
			return err
		}
		crlf, err := readChunkLine(tp)
		if err != nil {
			return err
		}
		if crlf != "" {
			return errBadChunk
		}
		if _, err := io.WriteString(dst, "\r\n"); err != nil {
			return err
		}
	}
}

// copyTrailer copies the trailer fields and the empty line that ends a
// chunked body. A line that is no field line (obs-fold, no name and
// colon, a name that is no token, whitespace before the colon, a control
// character in the value) makes the body malformed, as it would a head
// (ValidateHead); a field that frames or routes a message or describes a
// connection (Content-Length, Transfer-Encoding, Host, Trailer, and the
// hop-by-hop ones) is dropped: RFC 9110 6.5.1 forbids them in a trailer,
// and a next hop that merges trailers into the head must not meet them.
func copyTrailer(dst io.Writer, tp *bufio.Reader) error {
	for {
		line, err := readChunkLine(tp)
		if err != nil {
			return err
		}
		if line != "" {
			name, ok := trailerField(line)
			if !ok {
				return fmt.Errorf("%w: trailer line %q", errBadChunk, truncate([]byte(line)))
			}
			if forbiddenTrailer(name) {
				continue
			}
		}
		if _, err := io.WriteString(dst, line+"\r\n"); err != nil {
			return err
		}
		if line == "" {
			return nil
		}
	}
}

// trailerField returns the name of a trailer field line, and whether the
// line is a well formed field line (RFC 9112 5).
func trailerField(line string) (string, bool) {
	colon := strings.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return "", false // obs-fold, no name, whitespace before the colon, a name that is no token
	}
	for i := colon + 1; i < len(line); i++ {
		if c := line[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return line[:colon], true
}

// forbiddenTrailer reports whether a trailer field named name is dropped
// (copyTrailer).
func forbiddenTrailer(name string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return isHopByHop(name) || name == "Host" || name == "Trailer"
}

// readChunkLine reads a line without its line end; a line longer than the
// reader's buffer or maxChunkLine is malformed rather than read on.
func readChunkLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull), len(line) > maxChunkLine:
		return "", errBadChunk
	case err == io.EOF:
		return "", io.ErrUnexpectedEOF
	case err != nil:
		return "", err
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	return string(line), nil
}

// HTTP/1.1 message heads read byte for byte within limits, and bodies streamed by their framing.

package filter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splicer/splicer/proxy/httpcore"
)

// message is a request or response head as read, and how its body is framed.
type message struct {
	head   []byte // exactly as received, forwarded unchanged
	header http.Header
	method string // requests
	status int    // responses
	body   framing
	close  bool   // the sender asked to close after this message
	path   string // requests: the target's path, decoded and checked (targetPath)
	// upgrade is the protocol a request asks to switch to (Upgrade), after
	// h2c was stripped: a 101 is tunnelled only when it names this one.
	upgrade string
}

// bodyKind is how a body's end is found.
type bodyKind uint8

const (
	noBody   bodyKind = iota
	sized             // Content-Length
	chunked           // Transfer-Encoding: chunked
	untilEOF          // a response without either: ends when the upstream closes
)

type framing struct {
	kind bodyKind
	size int64
}

// httpError is a bad request and the response it gets.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// errClientGone means the client closed (or went idle) between requests.
var errClientGone = errors.New("client closed between requests")

// readRequest waits (up to the keep-alive timeout) for the next request,
// then reads its head within the header timeout.
func (c *conn) readRequest() (*message, error) {
	var first time.Time // the first request must arrive whole by then
	if rt := c.p.Limits.RequestTimeout; !c.served && rt > 0 {
		first = c.s.Pair().Created.Add(rt)
	}
	c.clientIn.fixed = first
	c.clientIn.setIdle(httpcore.KeepaliveIdle(c.p.IdleTimeout, c.p.Limits.KeepaliveTimeout))
	err := c.peekUnlessStopping()
	c.clientIn.setIdle(c.p.IdleTimeout)
	if err != nil {
		if errors.Is(err, syscall.ETIMEDOUT) {
			// Not gone but vanished (tcp_keepalive found it): the
			// pair's close reason says so (peer_timeout).
			return nil, err
		}
		return nil, errClientGone
	}
	c.clientIn.fixed = time.Now().Add(c.p.Limits.HeaderTimeout)
	if !first.IsZero() && first.Before(c.clientIn.fixed) {
		c.clientIn.fixed = first
	}
	c.served = true
	defer func() { c.clientIn.fixed = time.Time{} }()
	m, err := readMessage(c.cr, true, "", c.p.Limits)
	if isTimeout(err) {
		return nil, &httpError{http.StatusRequestTimeout, "request head not received in time"}
	}
	return m, err
}

// peekUnlessStopping waits for the first byte of the next request, giving up
// when a graceful shutdown begins: an idle keep-alive connection is closed
// then rather than holding the shutdown for its whole grace period. A
// request that arrived just as the shutdown began is still served.
func (c *conn) peekUnlessStopping() error {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-c.s.Stopping():
			c.clientIn.stop.Store(true)
			c.client.SetReadDeadline(time.Unix(1, 0))
		case <-done:
		}
	}()
	_, err := c.cr.Peek(1)
	close(done)
	<-exited
	if err == nil {
		c.clientIn.stop.Store(false)
	}
	return err
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// readMessage reads one head and works out its body's framing. method is
// the request's, for a response (a response to HEAD has no body).
func readMessage(r *bufio.Reader, isRequest bool, method string, lim httpcore.Limits) (*message, error) {
	head, err := readHead(r, isRequest, lim.MaxHeaderBytes, lim.MaxHeaders)
	if err != nil {
		return nil, err
	}
	if err := httpcore.ValidateHead(head, isRequest); err != nil {
		if isRequest && errors.Is(err, httpcore.ErrUnsupportedCoding) {
			return nil, &httpError{http.StatusNotImplemented, err.Error()}
		}
		if isRequest {
			return nil, badRequest("%v", err)
		}
		return nil, fmt.Errorf("malformed response: %w", err)
	}
	m := &message{head: head}
	if isRequest {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		if err != nil {
			return nil, badRequest("malformed request: %v", err)
		}
		if req.ProtoMajor != 1 {
			return nil, badRequest("unsupported protocol %s", req.Proto)
		}
		if hasToken(req.Header.Values("Upgrade"), "h2c") {
			// The filter reads HTTP/1.1 only: an h2c upgrade would move the
			// connection to HTTP/2 past every check. Stripped, the origin
			// answers in HTTP/1.1 (RFC 9113 3.2 lets a server ignore it).
			m.head = stripFields(head, "Upgrade", "HTTP2-Settings")
			req.Header.Del("Upgrade")
		}
		m.header, m.method, m.close = req.Header, req.Method, req.Close
		if m.path, err = targetPath(req.RequestURI); err != nil {
			return nil, err
		}
		m.upgrade = strings.ToLower(strings.TrimSpace(req.Header.Get("Upgrade")))
	} else {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: method})
		if err != nil {
			return nil, fmt.Errorf("malformed response: %w", err)
		}
		m.header, m.status, m.close = resp.Header, resp.StatusCode, resp.Close
	}
	m.body, err = bodyFraming(head, isRequest, method, m.status)
	m.head = canonicalHead(m.head)
	return m, err
}

// canonicalHead re-serializes a head that passed ValidateHead: the start
// line with single spaces, each field as "Name: value" (optional
// whitespace trimmed), CRLF line ends, fields in their order. The next hop
// then reads exactly the framing the filter read, whatever leniency its
// parser has (bare LF, odd whitespace).
func canonicalHead(head []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(head), "\r\n"), "\n")
	var b strings.Builder
	b.Grow(len(head))
	start := strings.TrimSuffix(lines[0], "\r")
	parts := strings.SplitN(strings.TrimSpace(start), " ", 3)
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	b.WriteString(strings.Join(parts, " "))
	b.WriteString("\r\n")
	for _, line := range lines[1:] {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if !ok {
			continue // ValidateHead refused such heads; nothing to forward
		}
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(strings.Trim(value, " \t"))
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// hasToken reports whether any comma-separated element of values is token
// (case-insensitively, ignoring a /version).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(t), "/")
			if strings.EqualFold(name, token) {
				return true
			}
		}
	}
	return false
}

// stripFields removes the named fields from a head, and their names from
// Connection, so the next hop never sees them.
func stripFields(head []byte, names ...string) []byte {
	lines := bytes.SplitAfter(head, []byte("\n"))
	out := make([]byte, 0, len(head))
	out = append(out, lines[0]...)
	for _, line := range lines[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		switch {
		case ok && slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(string(name), n) }):
			continue
		case ok && strings.EqualFold(string(name), "Connection"):
			var keep []string
			for _, t := range strings.Split(string(bytes.TrimSpace(value)), ",") {
				if t = strings.TrimSpace(t); t != "" && !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(t, n) }) {
					keep = append(keep, t)
				}
			}
			if len(keep) == 0 {
				continue
			}
			line = []byte("Connection: " + strings.Join(keep, ", ") + "\r\n")
		}
		out = append(out, line...)
	}
	return out
}

// readHead reads a head up to and including its empty line, enforcing the
// limits (0: none). Empty lines before a request line are skipped (RFC
// 9112 2.2).
func readHead(r *bufio.Reader, isRequest bool, maxBytes, maxHeaders int) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = math.MaxInt
	}
	if maxHeaders <= 0 {
		maxHeaders = math.MaxInt - 1
	}
	var head, long []byte
	lines := 0
	for {
		line, err := r.ReadSlice('\n')
		if len(head)+len(long)+len(line) > maxBytes {
			return nil, &httpError{http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("head larger than %d bytes", maxBytes)}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than r's buffer (a long cookie): kept
			// whole, within maxBytes, as its pieces come.
			long = append(long, line...)
			continue
		}
		if long != nil {
			line, long = append(long, line...), nil
		}
		if err != nil {
			if len(head) == 0 && len(line) == 0 && errors.Is(err, io.EOF) {
				return nil, errClientGone
			}
			if isTimeout(err) {
				return nil, err
			}
			return nil, badRequest("head cut short: %v", err)
		}
		blank := string(line) == "\r\n" || string(line) == "\n"
		if blank && len(head) == 0 && isRequest {
			continue
		}
		head = append(head, line...)
		if blank {
			return head, nil
		}
		if lines++; lines > maxHeaders+1 {
			return nil, &httpError{http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("more than %d header fields", maxHeaders)}
		}
	}
}

// bodyFraming applies RFC 9112 6.3 to the raw head: net/http's parsed
// headers hide a Content-Length next to Transfer-Encoding, which must be
// refused, not resolved.
func bodyFraming(head []byte, isRequest bool, method string, status int) (framing, error) {
	var cls, tes []string
	for _, line := range strings.Split(string(head), "\n")[1:] {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			cls = append(cls, value)
		case "transfer-encoding":
			tes = append(tes, value)
		}
	}
	if !isRequest && (method == http.MethodHead || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified) {
		return framing{kind: noBody}, nil
	}
	if len(cls) > 0 && len(tes) > 0 {
		if isRequest {
			return framing{}, badRequest("both Content-Length and Transfer-Encoding")
		}
		return framing{}, errors.New("response has both Content-Length and Transfer-Encoding")
	}
	if len(tes) > 0 {
		codings := strings.Split(strings.Join(tes, ","), ",")
		if !strings.EqualFold(strings.TrimSpace(codings[len(codings)-1]), "chunked") {
			if isRequest {
				return framing{}, badRequest("transfer coding %q without chunked last", strings.Join(tes, ", "))
			}
			return framing{kind: untilEOF}, nil
		}
		return framing{kind: chunked}, nil
	}
	if len(cls) > 0 {
		n, err := contentLength(cls)
		if err != nil {
			if isRequest {
				return framing{}, badRequest("%v", err)
			}
			return framing{}, err
		}
		return framing{kind: sized, size: n}, nil
	}
	if isRequest {
		return framing{kind: noBody}, nil
	}
	return framing{kind: untilEOF}, nil
}

// contentLength parses Content-Length values, which must all agree.
func contentLength(values []string) (int64, error) {
	var n int64 = -1
	for _, v := range strings.Split(strings.Join(values, ","), ",") {
		m, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || m < 0 || (n >= 0 && m != n) {
			return 0, fmt.Errorf("bad Content-Length %q", strings.Join(values, ", "))
		}
		n = m
	}
	return n, nil
}

// copyBody streams a body from r to w as framed, byte for byte; a chunked
// one may carry at most max bytes (0: no bound), a sized one was checked
// before its head went on.
func copyBody(w io.Writer, r *bufio.Reader, f framing, max int64) error {
	switch f.kind {
	case sized:
		n, err := io.CopyN(w, r, f.size)
		if err != nil {
			return fmt.Errorf("body: %d of %d bytes: %w", n, f.size, err)
		}
	case chunked:
		return httpcore.CopyChunkedMax(w, r, max)
	case untilEOF:
		_, err := io.Copy(w, r)
		return err
	}
	return nil
}

// BadInput marks the error as the client's fault, for the close reason.
func (e *httpError) BadInput() bool { return true }

// Message framing: where a body ends, the heads the proxy writes, hop-by-hop headers, and streaming chunked bodies.

package httpcore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// requestHead is the head the proxy sends upstream for req: origin-form
// target, Host first, hop-by-hop headers replaced by the proxy's own
// framing and connection handling. The caller may have changed req.Header
// (forwarding headers) before.
func requestHead(req *http.Request, upgrade string) []byte {
	h := req.Header.Clone()
	StripHopByHop(h)
	h.Del("Expect") // the proxy answers 100-continue itself, see expectContinue
	switch requestBody(req) {
	case bodyLength:
		h.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	case bodyChunked:
		h.Set("Transfer-Encoding", "chunked")
	}
	switch {
	case upgrade != "":
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", upgrade)
	case req.Close:
		h.Set("Connection", "close")
	case req.ProtoMinor == 0:
		h.Set("Connection", "keep-alive")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.%d\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.ProtoMinor, req.Host)
	h.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}

// responseHead is the head the proxy sends the client for resp.
func responseHead(req *http.Request, resp *http.Response, kind bodyKind, keep bool) []byte {
	h := resp.Header.Clone()
	length := h.Get("Content-Length") // a HEAD or 304 response's describes the entity: keep it
	StripHopByHop(h)
	switch kind {
	case bodyLength:
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	case bodyChunked:
		h.Set("Transfer-Encoding", "chunked")
	case bodyNone:
		if length != "" && resp.StatusCode != http.StatusNoContent && resp.StatusCode >= 200 {
			h.Set("Content-Length", length)
		}
	}
	switch {
	case !keep:
		h.Set("Connection", "close")
	case req.ProtoMinor == 0:
		h.Set("Connection", "keep-alive")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, statusText(resp))
	h.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
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

// copyChunked copies one chunked body from src to dst (sizes, extensions,
// trailers), parsing it to find where it ends; line ends are written as
// CRLF whatever the sender used (RFC 9112 2.2 lets a recipient take a
// bare LF), so the next hop reads the same framing.
func copyChunked(dst io.Writer, src *bufio.Reader) error {
	tp := src
	for {
		line, err := readChunkLine(tp)
		if err != nil {
			return err
		}
		size, err := ChunkSize(line)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(dst, line+"\r\n"); err != nil {
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
// chunked body.
func copyTrailer(dst io.Writer, tp *bufio.Reader) error {
	for {
		line, err := readChunkLine(tp)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(dst, line+"\r\n"); err != nil {
			return err
		}
		if line == "" {
			return nil
		}
	}
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

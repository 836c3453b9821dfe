// Every HTTP kind (http-forward, http-reverse, filter) answers 400 to the heads that let two parsers frame a request differently, 501 to a transfer coding it does not know, and still serves an ordinary request after them.

package all_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxytest"
)

// TestSmugglingHeadsGet400 sends each head to an origin that would take
// it (a lenient one, with no parser to refuse anything), so a 400 and no
// byte at the origin are the proxy's doing.
func TestSmugglingHeadsGet400(t *testing.T) {
	o := proxytest.NewLenientOrigin(t)
	up := o.Addr
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	heads := map[string]string{
		"space before colon": "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length : 5\r\n\r\nhello",
		"obs-folded TE":      "POST %s HTTP/1.1\r\nHost: %s\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
		"CL and TE":          "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TE in HTTP/1.0":     "POST %s HTTP/1.0\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"no Host in 1.1":     "GET %s HTTP/1.1\r\nX-Host: %s\r\n\r\n",
		"two Hosts":          "GET %s HTTP/1.1\r\nHost: %s\r\nHost: other\r\n\r\n",
		"Host with a quote":  "GET %s HTTP/1.1\r\nHost: %s\",for=203.0.113.66;x=\"\r\n\r\n",
	}
	for _, l := range listeners {
		addr := f.Addr(l.Name).String()
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
		for name, head := range heads {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				resp := o.Refused(t, addr, fmt.Sprintf(head, target, up))
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s through %s: %s, want 400", name, l.Proxy, resp.Status)
				}
			})
		}
		t.Run(l.Name+"/ordinary request", func(t *testing.T) {
			before := o.Requests()
			resp := fwdtest.Exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, up))
			if resp.StatusCode != http.StatusOK || o.Requests() != before+1 {
				t.Errorf("an ordinary GET through %s: %s, %d requests at the origin, want 200 and 1", l.Proxy, resp.Status, o.Requests()-before)
			}
		})
	}
}

// TestBadRequestBodiesGet400: a request body that the client gets wrong
// (a chunk size that is no number or has a space before it, fewer bytes
// than its Content-Length, a chunk cut short or not ended by CRLF) is the
// client's fault: every HTTP kind answers 400 and closes, where it
// answered 502 as if the upstream had failed (and the filter passed the
// spaces on). The origin reads each body to its end before it answers,
// as an upload handler does: one that answered first (the lab origin's
// 405 to a POST) would race the filter, which streams the body beside
// the response.
func TestBadRequestBodiesGet400(t *testing.T) {
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]string{
		"chunk size not a number": "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n\r\n",
		"short of its length":     "Content-Length: 100\r\n\r\nhello",
		"chunk cut short":         "Transfer-Encoding: chunked\r\n\r\n5\r\nhel",
		// Lenient framings that a next hop could read otherwise (RFC
		// 9112 7.1: chunk-size is hex digits, the data ends in CRLF).
		"space before chunk size": "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
		"space after chunk data":  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello \r\n0\r\n\r\n",
	}
	for _, l := range listeners {
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
		for name, body := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s", target, up, body)
				resp := fwdtest.ExchangeHalfClosed(t, f.Addr(l.Name).String(), raw)
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s through %s: %s, want 400", name, l.Proxy, resp.Status)
				}
			})
		}
	}
}

// TestUnsupportedTransferCodingsGet501: a request body in a transfer
// coding other than chunked alone gets 501 (RFC 9112 6.1) from every HTTP
// kind, where it got 400 as a malformed request, and the pair is counted
// as the client's bad request; "Chunked" in any case passes.
func TestUnsupportedTransferCodingsGet501(t *testing.T) {
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		target := fwdtest.RequestTarget(l, up, "/")
		t.Run(l.Name, func(t *testing.T) {
			for coding, want := range map[string]int{"gzip, chunked": http.StatusNotImplemented, "gzip": http.StatusNotImplemented, "Chunked": http.StatusOK} {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: %s\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target, up, coding)
				if resp := fwdtest.Exchange(t, f.Addr(l.Name).String(), raw); resp.StatusCode != want {
					t.Errorf("Transfer-Encoding: %s through %s: %s, want %d", coding, l.Proxy, resp.Status, want)
				}
			}
			testenv.Eventually(t, "the two 501s' pairs closed with reason bad_request", func() bool {
				return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", l.Name, "reason", "bad_request") == 2
			})
		})
	}
}

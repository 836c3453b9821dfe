// The json and combined lines: their fields, escaping, and the status a pair line carries.

package accesslog

import (
	"net"
	"strconv"
	"time"
	"unicode/utf8"
)

// combinedTime is nginx's $time_local.
const combinedTime = "02/Jan/2006:15:04:05 -0700"

// RecordsRequests reports whether pairs of the proxy kind have request
// lines of their own: the combined format writes those and not their
// pair lines (an HTTP log analyser counts requests).
func RecordsRequests(kind string) bool { return kind == "http-reverse" || kind == "http-forward" }

// PairStatus is the status of a pair line, as nginx's stream module sets
// $status: 200 for a pair that was carried (whoever ended it), 502 when
// no upstream could be reached, 403 for a destination the rules refuse,
// 400 for a request the proxy could not read, 500 for its own error.
func PairStatus(reason string) int {
	switch reason {
	case "upstream_refused", "upstream_unreachable", "upstream_timeout":
		return 502
	case "destination_denied":
		return 403
	case "bad_request":
		return 400
	case "proxy_error", "panic":
		return 500
	}
	return 200
}

// status is the line's status: a request's, or its pair's (PairStatus).
func (e *Entry) status() int {
	if e.Type == "pair" {
		return PairStatus(e.Reason)
	}
	return e.Status
}

// appendCombined appends e as a combined line: for a request, nginx's
//
//	$remote_addr - - [$time_local] "$request" $status $bytes_sent "$http_referer" "$http_user_agent"
//
// and for a pair of a kind without request lines the same with the
// request "CONNECT upstream kind" (a client's whole connection, as a
// CONNECT tunnel is). It reports false, having appended nothing, for a
// pair whose requests have lines of their own.
func appendCombined(b []byte, e *Entry) ([]byte, bool) {
	if e.Type == "pair" && RecordsRequests(e.Kind) {
		return b, false
	}
	b = append(b, clientIP(e.Client)...)
	b = append(b, " - - ["...)
	b = e.Time.AppendFormat(b, combinedTime)
	b = append(b, `] "`...)
	if e.Type == "pair" {
		b = appendEscaped(append(b, "CONNECT "...), orDash(e.Upstream))
		b = appendEscaped(append(b, ' '), e.Kind)
	} else {
		b = appendEscaped(b, orDash(e.Method))
		b = appendEscaped(append(b, ' '), orDash(e.Target))
		b = appendEscaped(append(b, ' '), orDash(e.Protocol))
	}
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.status()), 10)
	b = strconv.AppendInt(append(b, ' '), e.BytesDown, 10)
	b = appendEscaped(append(b, ` "`...), orDash(e.Referer))
	b = appendEscaped(append(b, `" "`...), orDash(e.UserAgent))
	return append(b, "\"\n"...), true
}

// clientIP is the address of host:port, as $remote_addr is.
func clientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return orDash(addr)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// appendEscaped appends s as nginx escapes a variable in a log line:
// '"', '\' and bytes outside printable ASCII as \xHH, so that no client
// can end a quoted field or a line early.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendJSON appends e as one JSON object with every field, in this
// order, whatever the line's type: a fixed set for a consumer's schema.
func appendJSON(b []byte, e *Entry) []byte {
	b = appendKey(b, '{', "time")
	b = appendString(b, e.Time.Format(time.RFC3339Nano))
	for _, f := range []struct{ k, v string }{{"type", e.Type}, {"listener", e.Listener}, {"proxy", e.Kind},
		{"client", e.Client}, {"method", e.Method}, {"host", e.Host}, {"path", e.Target}, {"protocol", e.Protocol}} {
		b = appendString(appendKey(b, ',', f.k), f.v)
	}
	b = strconv.AppendInt(appendKey(b, ',', "status"), int64(e.status()), 10)
	b = strconv.AppendInt(appendKey(b, ',', "bytes_up"), e.BytesUp, 10)
	b = strconv.AppendInt(appendKey(b, ',', "bytes_down"), e.BytesDown, 10)
	b = strconv.AppendFloat(appendKey(b, ',', "duration_s"), e.Duration.Seconds(), 'f', -1, 64)
	b = strconv.AppendFloat(appendKey(b, ',', "upstream_s"), e.UpstreamDuration.Seconds(), 'f', -1, 64)
	for _, f := range []struct{ k, v string }{{"user_agent", e.UserAgent}, {"referer", e.Referer},
		{"request_id", e.RequestID}, {"upstream", e.Upstream}, {"engine", e.Engine},
		{"reason", e.Reason}, {"note", e.Note}, {"err", e.Err}} {
		b = appendString(appendKey(b, ',', f.k), f.v)
	}
	return append(b, "}\n"...)
}

func appendKey(b []byte, sep byte, k string) []byte {
	b = append(b, sep, '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

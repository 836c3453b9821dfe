// Package proxyproto writes and reads PROXY protocol v1 and v2 headers.
//
// A listener with `proxy_protocol: v1` or `v2` sends the header to each
// upstream right after connecting and before any client byte, so the
// upstream learns the client's address although the connection comes from
// the forwarder. The header names the client (source) and the address the
// client connected to on the forwarder (destination), as HAProxy does. See
// https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt.
//
//	hdr, err := proxyproto.Header("v2", client.RemoteAddr(), client.LocalAddr())
//	...
//	upstream.Write(hdr)
//
// A listener with `accept_proxy_protocol` reads the header a trusted
// balancer sends first (Consume), taking exactly its bytes off the
// socket, and refuses a connection from anyone else that starts with one
// (Starts).
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// signature starts every v2 header; it cannot start a v1 header or an HTTP request.
var signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

const (
	v2VersionProxy = 0x21 // version 2, command PROXY
	v2VersionLocal = 0x20 // version 2, command LOCAL
	v2TCP4         = 0x11 // AF_INET, STREAM
	v2TCP6         = 0x21 // AF_INET6, STREAM
	v2Unspec       = 0x00
	v1MaxLen       = 107 // the longest v1 line, CRLF included
)

// Header returns the header of version v ("v1" or "v2") for a connection from
// client to local. An address that is not TCP gives the protocol's
// "unknown" form, which tells the upstream to use the connection's own
// addresses. An IPv4 address paired with an IPv6 one is sent as IPv4-mapped
// IPv6, since a header has one family.
func Header(v string, client, local net.Addr) ([]byte, error) {
	src, sok := addrPort(client)
	dst, dok := addrPort(local)
	known := sok && dok
	if known && src.Addr().Is4() != dst.Addr().Is4() {
		src = netip.AddrPortFrom(netip.AddrFrom16(src.Addr().As16()), src.Port())
		dst = netip.AddrPortFrom(netip.AddrFrom16(dst.Addr().As16()), dst.Port())
	}
	switch v {
	case "v1":
		return v1(src, dst, known), nil
	case "v2":
		return v2(src, dst, known), nil
	}
	return nil, fmt.Errorf("unknown PROXY protocol version %q (want v1 or v2)", v)
}

// addrPort returns a TCP address with IPv4-mapped addresses unmapped.
func addrPort(a net.Addr) (netip.AddrPort, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta == nil {
		return netip.AddrPort{}, false
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.Addr().IsValid()
}

func v1(src, dst netip.AddrPort, known bool) []byte {
	if !known {
		return []byte("PROXY UNKNOWN\r\n")
	}
	fam := "TCP4"
	if !src.Addr().Is4() {
		fam = "TCP6"
	}
	return fmt.Appendf(nil, "PROXY %s %s %s %d %d\r\n", fam, src.Addr(), dst.Addr(), src.Port(), dst.Port())
}

func v2(src, dst netip.AddrPort, known bool) []byte {
	b := append([]byte(nil), signature...)
	b = append(b, v2VersionProxy)
	if !known {
		return append(b, v2Unspec, 0, 0)
	}
	fam := byte(v2TCP4)
	if !src.Addr().Is4() {
		fam = v2TCP6
	}
	s, d := src.Addr().AsSlice(), dst.Addr().AsSlice()
	b = append(b, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(2*len(s)+4))
	b = append(b, s...)
	b = append(b, d...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// Local returns the header of version v for a connection the forwarder
// makes on its own account, a health check: v2's LOCAL command, v1's
// UNKNOWN. The server keeps the connection's own addresses, as the
// specification asks of it; a server that wants a header on every
// connection (nginx's "listen ... proxy_protocol") refuses one without.
func Local(v string) ([]byte, error) {
	switch v {
	case "v1":
		return []byte("PROXY UNKNOWN\r\n"), nil
	case "v2":
		return append(append([]byte(nil), signature...), v2VersionLocal, v2Unspec, 0, 0), nil
	}
	return nil, fmt.Errorf("unknown PROXY protocol version %q (want v1 or v2)", v)
}

// Client names a connection's client: an engine.Pair, whose client a
// trusted balancer's own header may have named.
type Client interface {
	ClientAddr() net.Addr      // the client
	ClientLocalAddr() net.Addr // the address it connected to
}

// Send writes the header of version v for client's connection to upstream;
// an empty v sends nothing.
func Send(v string, client Client, upstream io.Writer) error {
	if v == "" {
		return nil
	}
	hdr, err := Header(v, client.ClientAddr(), client.ClientLocalAddr())
	if err != nil {
		return err
	}
	if _, err := upstream.Write(hdr); err != nil {
		return fmt.Errorf("write PROXY protocol header: %w", err)
	}
	return nil
}

// Info is what a header says; Source and Destination are invalid for the
// unknown/LOCAL forms.
type Info struct {
	Version             int
	Source, Destination netip.AddrPort
}

// ErrNoHeader means the stream does not start with a PROXY protocol header.
var ErrNoHeader = errors.New("no PROXY protocol header")

// MaxV2 is the longest v2 header read, TLVs included: a cloud balancer's
// (an endpoint ID, a link ID) and HAProxy's TLS TLVs fit many times over.
// A longer one is refused, so that a sender cannot make a listener hold
// 64 KiB per connection before a byte of it is known to be good.
const MaxV2 = 16 + 2048

// errShort means the bytes so far start a header that is not complete yet.
var errShort = errors.New("PROXY protocol header incomplete")

// Read reads one v1 or v2 header from r, consuming exactly the header's bytes.
func Read(r *bufio.Reader) (Info, error) {
	for n := 1; ; n++ {
		b, perr := r.Peek(n)
		info, used, err := parse(b)
		switch {
		case err == nil:
			r.Discard(used)
			return info, nil
		case err != errShort:
			return Info{}, err
		case perr != nil:
			return Info{}, fmt.Errorf("PROXY protocol header: %w", unexpected(perr))
		}
		n = max(n, used-1) // a v2 header's length is known: peek it whole
	}
}

// unexpected is io.ErrUnexpectedEOF for an end of stream inside a header.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parse reads the header b starts with and how many bytes it takes. An
// incomplete header gives errShort and, when it is known (v2), the
// header's whole length, else 0. One parser serves both Read and
// Consume, so a stream and a socket read a header alike.
func parse(b []byte) (Info, int, error) {
	if n := min(len(b), len(signature)); bytes.Equal(b[:n], signature[:n]) {
		return parseV2(b)
	}
	if n := min(len(b), 6); string(b[:n]) == "PROXY "[:n] {
		return parseV1(b)
	}
	return Info{}, 0, ErrNoHeader
}

func parseV1(b []byte) (Info, int, error) {
	end := bytes.IndexByte(b[:min(len(b), v1MaxLen)], '\n')
	if end < 0 {
		if len(b) >= v1MaxLen {
			return Info{}, 0, errors.New("v1 header: no CRLF within 107 bytes")
		}
		return Info{}, 0, errShort
	}
	s, ok := strings.CutSuffix(string(b[:end+1]), "\r\n")
	if !ok {
		return Info{}, 0, fmt.Errorf("v1 header: line %q does not end in CRLF", b[:end+1])
	}
	info, err := v1Fields(s)
	return info, end + 1, err
}

func v1Fields(s string) (Info, error) {
	f := strings.Split(s, " ")
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return Info{Version: 1}, nil
	}
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return Info{}, fmt.Errorf("v1 header: malformed %q", s)
	}
	src, err1 := v1Addr(f[2], f[4], f[1] == "TCP4")
	dst, err2 := v1Addr(f[3], f[5], f[1] == "TCP4")
	if err := errors.Join(err1, err2); err != nil {
		return Info{}, fmt.Errorf("v1 header %q: %w", s, err)
	}
	return Info{Version: 1, Source: src, Destination: dst}, nil
}

func v1Addr(ip, port string, want4 bool) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if a.Is4() != want4 || a.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("address %s is not of the header's family", a)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

func parseV2(b []byte) (Info, int, error) {
	if len(b) < 16 {
		return Info{}, 0, errShort
	}
	if b[12]>>4 != 2 {
		return Info{}, 0, fmt.Errorf("v2 header: version %d", b[12]>>4)
	}
	if cmd := b[12] & 0xf; cmd > 1 {
		return Info{}, 0, fmt.Errorf("v2 header: command %d", cmd)
	}
	total := 16 + int(binary.BigEndian.Uint16(b[14:]))
	if total > MaxV2 {
		return Info{}, 0, fmt.Errorf("v2 header: %d bytes, more than %d", total, MaxV2)
	}
	if len(b) < total {
		return Info{}, total, errShort
	}
	info, err := v2Addrs(b[12], b[13], b[16:total])
	return info, total, err
}

// v2Addrs reads the addresses of a v2 header's body, for the command and
// family bytes ver and fam.
func v2Addrs(ver, fam byte, body []byte) (Info, error) {
	info := Info{Version: 2}
	if ver&0xf == 0 { // LOCAL: the sender's own connection, no addresses
		return info, nil
	}
	var n int
	switch fam {
	case v2TCP4:
		n = 4
	case v2TCP6:
		n = 16
	default:
		return info, nil // a family this reader does not know: addresses unknown
	}
	if len(body) < 2*n+4 {
		return Info{}, fmt.Errorf("v2 header: %d address bytes, want %d", len(body), 2*n+4)
	}
	src, _ := netip.AddrFromSlice(body[:n])
	dst, _ := netip.AddrFromSlice(body[n : 2*n])
	info.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[2*n:]))
	info.Destination = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[2*n+2:]))
	return info, nil
}

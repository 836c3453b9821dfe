// Tests of the exact header bytes of both versions for each address family, and that Read takes back what Header wrote.

package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func tcpAddr(s string) *net.TCPAddr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestHeaderV1(t *testing.T) {
	for _, c := range []struct {
		name          string
		client, local net.Addr
		want          string
	}{
		{"ipv4", tcpAddr("10.99.1.2:40000"), tcpAddr("10.99.1.1:7000"), "PROXY TCP4 10.99.1.2 10.99.1.1 40000 7000\r\n"},
		{"ipv6", tcpAddr("[fd99:1::2]:40000"), tcpAddr("[fd99:1::1]:443"), "PROXY TCP6 fd99:1::2 fd99:1::1 40000 443\r\n"},
		{"ipv4-mapped on a dual-stack socket", tcpAddr("[::ffff:10.0.0.1]:1"), tcpAddr("[::ffff:10.0.0.2]:2"), "PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n"},
		{"mixed families", tcpAddr("10.0.0.1:1"), tcpAddr("[fd99::1]:2"), "PROXY TCP6 ::ffff:10.0.0.1 fd99::1 1 2\r\n"},
		{"not TCP", &net.UnixAddr{Name: "/x"}, tcpAddr("10.0.0.2:2"), "PROXY UNKNOWN\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Header("v1", c.client, c.local)
			if err != nil || string(got) != c.want {
				t.Errorf("Header(v1) = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestHeaderV2(t *testing.T) {
	sig := "0d0a0d0a000d0a515549540a"
	for _, c := range []struct {
		name          string
		client, local net.Addr
		want          string // hex
	}{
		{"ipv4", tcpAddr("10.99.1.2:40000"), tcpAddr("10.99.1.1:7000"),
			sig + "21" + "11" + "000c" + "0a630102" + "0a630101" + "9c40" + "1b58"},
		{"ipv6", tcpAddr("[fd99:1::2]:40000"), tcpAddr("[fd99:1::1]:443"),
			sig + "21" + "21" + "0024" + "fd990001000000000000000000000002" + "fd990001000000000000000000000001" + "9c40" + "01bb"},
		{"not TCP", nil, tcpAddr("10.0.0.2:2"), sig + "21" + "00" + "0000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Header("v2", c.client, c.local)
			if err != nil || hex.EncodeToString(got) != c.want {
				t.Errorf("Header(v2) = %x, %v; want %s", got, err, c.want)
			}
		})
	}
}

func TestHeaderUnknownVersion(t *testing.T) {
	if _, err := Header("v3", tcpAddr("10.0.0.1:1"), tcpAddr("10.0.0.2:2")); err == nil || !strings.Contains(err.Error(), "v3") {
		t.Errorf("Header(v3) error = %v", err)
	}
}

// TestReadTakesBackHeader checks Read against Header and that it consumes
// exactly the header, leaving the client's first bytes in the reader.
func TestReadTakesBackHeader(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		for _, pair := range [][2]string{{"10.99.1.2:40000", "10.99.1.1:7000"}, {"[fd99:1::2]:1", "[fd99:1::1]:65535"}} {
			src, dst := netip.MustParseAddrPort(pair[0]), netip.MustParseAddrPort(pair[1])
			hdr, err := Header(v, net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst))
			if err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(bytes.NewReader(append(hdr, "GET / HTTP/1.1\r\n"...)))
			info, err := Read(r)
			if err != nil || info.Source != src || info.Destination != dst || info.Version != int(v[1]-'0') {
				t.Errorf("%s %v: Read = %+v, %v", v, pair, info, err)
			}
			if rest, _ := r.ReadString('\n'); rest != "GET / HTTP/1.1\r\n" {
				t.Errorf("%s: after the header the reader holds %q", v, rest)
			}
		}
	}
}

func TestReadRefusesNonHeaders(t *testing.T) {
	for _, in := range []string{"GET / HTTP/1.1\r\n", "PROXY TCP4 1.2.3.4\r\n", "PROXY TCP4 ::1 ::2 1 2\r\n", "PROXY " + strings.Repeat("x", 200)} {
		if info, err := Read(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("Read(%q) = %+v, want an error", in, info)
		}
	}
}

func TestSendNothingWhenOff(t *testing.T) {
	var buf bytes.Buffer
	if err := Send("", nil, &buf); err != nil || buf.Len() != 0 {
		t.Errorf("Send(\"\") wrote %q, %v", buf.Bytes(), err)
	}
}

// TestLocalHeadersReadAsUnknown: a health check's header (Local) reads
// back whole as one without addresses, in both versions, and an unknown
// version is an error.
func TestLocalHeadersReadAsUnknown(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		hdr, err := Local(v)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(bytes.NewReader(append(hdr, "GET /"...)))
		info, err := Read(r)
		if err != nil || info.Source.IsValid() || info.Destination.IsValid() {
			t.Errorf("%s: Read = %+v, %v; want a header without addresses", v, info, err)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "GET /" {
			t.Errorf("%s: after the header %q, want the request", v, rest)
		}
	}
	if _, err := Local("v3"); err == nil {
		t.Error("Local(v3): no error")
	}
}

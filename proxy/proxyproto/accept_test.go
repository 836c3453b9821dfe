// Tests of Consume and Starts on real loopback sockets: a header is taken off whole, even when it arrives in pieces, and not one byte after it; malformed and missing headers are refused.

package proxyproto

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

// socketPair returns the two ends of a loopback TCP connection, closed at
// the end of the test; the accepted end has a read deadline of d.
func socketPair(tb testing.TB, d time.Duration) (client, accepted *net.TCPConn) {
	tb.Helper()
	accepted, client = testenv.TCPPair(tb)
	accepted.SetReadDeadline(time.Now().Add(d))
	return client, accepted
}

// sendInPieces writes each piece, pausing between them so that each
// arrives in a segment of its own.
func sendInPieces(c *net.TCPConn, pieces ...string) {
	for i, p := range pieces {
		if i > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		c.Write([]byte(p))
	}
}

func TestConsumeTakesExactlyTheHeader(t *testing.T) {
	v2, _ := Header("v2", tcpAddr("10.99.1.2:40000"), tcpAddr("10.99.1.1:7000"))
	local, _ := Local("v2")
	for _, c := range []struct {
		name   string
		pieces []string
		src    string // "" for a header without addresses
	}{
		{"v1 whole", []string{"PROXY TCP4 10.99.1.2 10.99.1.1 40000 7000\r\nGET / HTTP/1.1\r\n"}, "10.99.1.2:40000"},
		{"v1 in pieces", []string{"PRO", "XY TCP4 10.99.1.2 10.99.1.1 40000 ", "7000\r", "\nGET / HTTP/1.1\r\n"}, "10.99.1.2:40000"},
		{"v1 unknown", []string{"PROXY UNKNOWN\r\nGET / HTTP/1.1\r\n"}, ""},
		{"v2 whole", []string{string(v2) + "GET / HTTP/1.1\r\n"}, "10.99.1.2:40000"},
		{"v2 in pieces", []string{string(v2[:5]), string(v2[5:15]), string(v2[15:20]), string(v2[20:]) + "GET / HTTP/1.1\r\n"}, "10.99.1.2:40000"},
		{"v2 local", []string{string(local) + "GET / HTTP/1.1\r\n"}, ""},
		{"v2 with a TLV", []string{string(v2[:15]) + string(rune(12+7)) + string(v2[16:]) + "\x04\x00\x04abcd" + "GET / HTTP/1.1\r\n"}, "10.99.1.2:40000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, conn := socketPair(t, 5*time.Second)
			go sendInPieces(client, c.pieces...)
			info, err := Consume(conn)
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if got := addrOrEmpty(info); got != c.src {
				t.Errorf("source %q, want %q", got, c.src)
			}
			rest := make([]byte, len("GET / HTTP/1.1\r\n"))
			if _, err := io.ReadFull(conn, rest); err != nil || string(rest) != "GET / HTTP/1.1\r\n" {
				t.Errorf("after the header the socket holds %q, %v", rest, err)
			}
		})
	}
}

func addrOrEmpty(i Info) string {
	if !i.Source.IsValid() {
		return ""
	}
	return i.Source.String()
}

// TestConsumeRefusesMalformed: each malformed header is an error, and one
// cut short ends at the deadline rather than hanging.
func TestConsumeRefusesMalformed(t *testing.T) {
	sig := string(signature)
	for _, c := range []struct{ name, in string }{
		{"v1 without CR", "PROXY TCP4 10.0.0.1 10.0.0.2 1 2\nGET"},
		{"v1 too long", "PROXY TCP4 " + string(make([]byte, 120))},
		{"v1 wrong family", "PROXY TCP4 ::1 ::2 1 2\r\n"},
		{"v1 bad port", "PROXY TCP4 10.0.0.1 10.0.0.2 1 65536\r\n"},
		{"v1 missing field", "PROXY TCP4 10.0.0.1 10.0.0.2 1\r\n"},
		{"v1 unknown protocol", "PROXY UDP4 10.0.0.1 10.0.0.2 1 2\r\n"},
		{"v2 version 1", sig + "\x11\x11\x00\x0c" + string(make([]byte, 12))},
		{"v2 command 2", sig + "\x22\x11\x00\x0c" + string(make([]byte, 12))},
		{"v2 addresses cut", sig + "\x21\x11\x00\x04" + "\x0a\x00\x00\x01"},
		{"v2 longer than MaxV2", sig + "\x21\x11\xff\xff"},
		{"v1 cut short", "PROXY TCP4 10.0.0.1"},
		{"v2 cut short", sig + "\x21\x11\x00\x0c\x0a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, conn := socketPair(t, 300*time.Millisecond)
			client.Write([]byte(c.in))
			info, err := Consume(conn)
			if err == nil || errors.Is(err, ErrNoHeader) {
				t.Errorf("Consume = %+v, %v; want an error about the header", info, err)
			}
		})
	}
}

// TestConsumeNoHeader: a stream that starts otherwise is ErrNoHeader and
// keeps every byte.
func TestConsumeNoHeader(t *testing.T) {
	client, conn := socketPair(t, 5*time.Second)
	client.Write([]byte("GET / HTTP/1.1\r\n"))
	if _, err := Consume(conn); !errors.Is(err, ErrNoHeader) {
		t.Fatalf("Consume: %v, want ErrNoHeader", err)
	}
	rest := make([]byte, 16)
	if _, err := io.ReadFull(conn, rest); err != nil || string(rest) != "GET / HTTP/1.1\r\n" {
		t.Errorf("the socket holds %q, %v", rest, err)
	}
}

func TestStarts(t *testing.T) {
	v2, _ := Header("v2", tcpAddr("10.99.1.2:40000"), tcpAddr("10.99.1.1:7000"))
	for _, c := range []struct {
		pieces []string
		want   bool
	}{
		{[]string{"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n"}, true},
		{[]string{"PR", "OXY UNKNOWN\r\n"}, true},
		{[]string{string(v2[:4]), string(v2[4:])}, true},
		{[]string{"POST / HTTP/1.1\r\n"}, false},
		{[]string{"PRI * HTTP/2.0\r\n"}, false},
		{[]string{"\r\n\r\nGET"}, false},
		{[]string{"\x16\x03\x01"}, false},
	} {
		client, conn := socketPair(t, 5*time.Second)
		go sendInPieces(client, c.pieces...)
		got, err := Starts(conn)
		if err != nil || got != c.want {
			t.Errorf("Starts(%q) = %v, %v; want %v", c.pieces, got, err, c.want)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(conn, first); err != nil || first[0] != c.pieces[0][0] {
			t.Errorf("Starts(%q) took bytes: the socket starts with %q, %v", c.pieces, first, err)
		}
	}
}

// TestStartsSilentClient: a client that sends nothing ends at the deadline.
func TestStartsSilentClient(t *testing.T) {
	_, conn := socketPair(t, 100*time.Millisecond)
	if _, err := Starts(conn); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Starts on a silent client: %v, want the deadline", err)
	}
}

// Bodies that come in parts: a response body relayed as it comes, whole and in order, one that ends early never looking complete; a request body sent after its head; a slow reader of a copied body.

package httprev_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

// TestBodyInTwoParts: the server sends each response's head and part of
// its body, then the rest only once the client has the first part (a body
// that trickles is relayed as it comes, not held until it is whole); the
// client gets every body whole, on one kept connection. The last body
// ends early: the client must not see it complete. 10 KiB fits in the
// head reader; 400 KiB, which http-reverse also copies itself
// (httpcore.ReverseCopyBelow), is read through the body buffer.
func TestBodyInTwoParts(t *testing.T) {
	for _, size := range []int{10 << 10, 400 << 10} {
		t.Run(strconv.Itoa(size>>10)+"KiB", func(t *testing.T) { testBodyInTwoParts(t, size) })
	}
}

func testBodyInTwoParts(t *testing.T, size int) {
	const first = 4 << 10
	body := make([]byte, size)
	rand.Read(body) // no period: a byte lost or repeated anywhere shows
	head := []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n")
	const full = 3
	more := make(chan bool)
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			c.Write(append(append([]byte{}, head...), body[:first]...))
			if i == full {
				c.Write(body[first : first+2<<10])
				return // closed with 4 KiB owed
			}
			select {
			case <-more:
			case <-time.After(5 * time.Second):
				return
			}
			c.Write(body[first:])
		}
	})
	c := dialReverse(t, "pipe", up)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i <= full; i++ {
		if _, err := c.Write([]byte("GET /obj HTTP/1.1\r\nHost: app.example\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if i == full {
			if err == nil {
				var got []byte
				got, err = io.ReadAll(resp.Body)
				if err == nil {
					t.Fatalf("response %d: %d bytes read whole from a body that ended early", i, len(got))
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		got := make([]byte, size)
		if _, err := io.ReadFull(resp.Body, got[:first]); err != nil {
			t.Fatalf("response %d: the first part: %v", i, err)
		}
		more <- true
		if _, err := io.ReadFull(resp.Body, got[first:]); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("response %d: %v, or not the %d bytes sent", i, err, size)
		}
	}
}

// TestRequestBodyInParts: a request body with a length that the client
// sends after its head, in three parts: the back-end reads it whole (its
// length and digest come back), twice on one kept connection. 10 KiB and
// 400 KiB: http-reverse copies both itself (httpcore.ReverseCopyBelow),
// the larger through the body buffer.
func TestRequestBodyInParts(t *testing.T) {
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		testenv.EachRequest(bufio.NewReader(c), func(_ *http.Request, got []byte) bool {
			answer := fmt.Sprintf("%d %x", len(got), sha256.Sum256(got))
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
			return true
		})
	})
	for _, size := range []int{10 << 10, 400 << 10} {
		t.Run(strconv.Itoa(size>>10)+"KiB", func(t *testing.T) {
			c := dialReverse(t, "pipe", up)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for i := range 2 {
				body := make([]byte, size)
				rand.Read(body)
				fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: %d\r\n\r\n", size)
				for _, part := range [][]byte{body[:size/3], body[size/3 : 2*size/3], body[2*size/3:]} {
					time.Sleep(10 * time.Millisecond) // each part after the proxy read the last
					if _, err := c.Write(part); err != nil {
						t.Fatal(err)
					}
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				got, _ := io.ReadAll(resp.Body)
				if want := fmt.Sprintf("%d %x", size, sha256.Sum256(body)); string(got) != want {
					t.Fatalf("request %d: the back-end read %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestSlowReaderOfACopiedBody: a client with a receive buffer smaller
// than the body reads 400 KiB responses (which http-reverse copies
// itself) 4 KiB at a time, pausing between reads: the proxy's writes wait
// for room instead of failing or dropping, and every body arrives whole,
// twice on one connection.
func TestSlowReaderOfACopiedBody(t *testing.T) {
	const size = 400 << 10
	c := dialReverse(t, "pipe", fwdtest.HTTPOrigin(t))
	c.(*net.TCPConn).SetReadBuffer(128 << 10) // a window above loopback's 64 KiB MSS, below the body
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReaderSize(c, 4<<10)
	for i := range 2 {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", origin.ObjectPath(size))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		h := sha256.New()
		buf := make([]byte, 4<<10)
		for n := int64(0); n < size; {
			k, err := resp.Body.Read(buf)
			h.Write(buf[:k])
			n += int64(k)
			if err != nil && n < size {
				t.Fatalf("response %d: %v after %d bytes", i, err, n)
			}
			time.Sleep(200 * time.Microsecond) // a slow reader
		}
		if got := [32]byte(h.Sum(nil)); got != origin.ObjectSHA256(size) {
			t.Fatalf("response %d: the body differs from the origin's", i)
		}
	}
}

// dialReverse starts an http-reverse listener with engine in front of
// upstream and returns a connection to it, closed when the test ends.
func dialReverse(tb testing.TB, engine, upstream string) net.Conn {
	tb.Helper()
	f := fwdtest.ReverseProxy(tb, engine, "", upstream)
	return fwdtest.DialFor(tb, f.Addr("rev").String(), time.Hour)
}

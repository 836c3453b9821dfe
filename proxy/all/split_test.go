// Bodies that come in parts: a response body relayed as it comes, whole and in order, one that ends early never looking complete; a request body sent after its head.

package all_test

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
	up := rawBackend(t, func(c net.Conn) {
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
	up := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			got, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			answer := fmt.Sprintf("%d %x", len(got), sha256.Sum256(got))
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		}
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

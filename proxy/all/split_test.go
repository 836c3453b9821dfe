// A small body that comes in two parts is read whole before it is relayed, and one that ends early closes the client's connection.

package all_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestBodyInTwoParts: the server sends each response's head and part of
// its body, pauses, then the rest; the client gets every body whole, on
// one kept connection. The last body ends early: the client must not see
// it complete.
func TestBodyInTwoParts(t *testing.T) {
	const size = 10 << 10
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	head := []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n")
	const full = 3
	up := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			c.Write(append(append([]byte{}, head...), body[:4<<10]...))
			time.Sleep(20 * time.Millisecond)
			if i == full {
				c.Write(body[4<<10 : 6<<10])
				return // closed with 4 KiB owed
			}
			c.Write(body[4<<10:])
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
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("response %d: %d bytes, %v; want the %d sent", i, len(got), err, size)
		}
	}
}

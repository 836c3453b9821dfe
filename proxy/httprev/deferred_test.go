// Responses written by the wait for the next request: pipelined and closing requests still get every response, whole and in order, whenever the next request arrives.

package httprev_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/origin"
)

func TestSmallResponsesPipelined(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	c := dialReverse(t, "pipe", up)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Bodies that come whole with their heads (up to the reader's 16 KiB)
	// wait in the upstream reader's buffer: the next ones must not
	// overwrite them.
	sizes := []int64{1 << 10, 10, 10 << 10, 2 << 10, 15 << 10, 100 << 10, 12 << 10, 5}
	var reqs bytes.Buffer
	for i, size := range sizes {
		closing := ""
		if i == len(sizes)-1 {
			closing = "Connection: close\r\n"
		}
		fmt.Fprintf(&reqs, "GET %s HTTP/1.1\r\nHost: app.example\r\n%s\r\n", origin.ObjectPath(size), closing)
	}
	// One request, then the rest at once: some arrive while a response
	// waits to be sent.
	first, rest, _ := bytes.Cut(reqs.Bytes(), []byte("\r\n\r\n"))
	if _, err := c.Write(append(first, "\r\n\r\n"...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, size := range sizes {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if i == 0 {
			if _, err := c.Write(rest); err != nil {
				t.Fatal(err)
			}
		}
		h := sha256.New()
		if n, err := io.Copy(h, resp.Body); n != size || err != nil {
			t.Fatalf("response %d: %d bytes, want %d: %v", i, n, size, err)
		}
		if [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
			t.Fatalf("response %d: the body of %d bytes is not the object's", i, size)
		}
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the closing request: %d bytes, %v, want EOF", n, err)
	}
}

// TestPipelinedRequestBeforeTheResponse: the client's next request
// reaches the proxy while the proxy waits for the back-end's answer to
// the one before; the answer, small and whole, leaves with the wait for
// that next request (deferResponse), which must find it in the socket
// rather than wait for the client to send again. It waited until the
// idle timeout: the request had woken the poller before that wait began.
func TestPipelinedRequestBeforeTheResponse(t *testing.T) {
	for _, engine := range []string{"copy", "pipe"} {
		t.Run(engine, func(t *testing.T) {
			next := make(chan struct{})
			up := fwdtest.RawBackend(t, func(c net.Conn) {
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					if i == 0 {
						<-next // the second request is in the proxy's socket
					}
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n%02d", i)
				}
			})
			c := dialReverse(t, engine, up)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			for i := range 2 {
				if _, err := fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: app.example\r\n\r\n", i); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond) // read by the proxy, or waiting in its socket
			}
			close(next)
			br := bufio.NewReader(c)
			for i := range 2 {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				if body, err := io.ReadAll(resp.Body); err != nil || string(body) != fmt.Sprintf("%02d", i) {
					t.Fatalf("response %d: body %q, %v", i, body, err)
				}
			}
		})
	}
}

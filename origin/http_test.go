// Tests of the http protocol and of the size syntax.

package origin

import (
	"crypto/sha256"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1460", 1460},
		{"10B", 10},
		{"1KB", 1000},
		{"1kb", 1000},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"1MB", 1e6},
		{"1MiB", 1 << 20},
		{"2GB", 2e9},
		{"3GiB", 3 << 30},
		{"1024GiB", MaxObjectSize},
	} {
		if got, err := ParseSize(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "KB", "-1", "1.5MB", "1 KB", "1TB", "1025GiB", "99999999999999999999", "12x"} {
		if got, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", bad, got)
		}
	}
}

func TestHTTPObjects(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	base := "http://" + serve(t, s, HTTP, WithName("origin-a"))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	for _, tt := range []struct {
		path string
		size int64
	}{
		{"/obj/0", 0},
		{"/obj/1", 1},
		{"/obj/1460", 1460},
		{"/obj/64KiB", 64 << 10},
		{"/obj/1MB", 1e6},
		{ObjectPath(3<<20 + 5), 3<<20 + 5},
	} {
		resp, err := client.Get(base + tt.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tt.path, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %s: body: %v", tt.path, err)
		}
		if resp.StatusCode != http.StatusOK || resp.ContentLength != tt.size || n != tt.size {
			t.Errorf("GET %s: status %d, Content-Length %d, %d bytes; want 200 and %d",
				tt.path, resp.StatusCode, resp.ContentLength, n, tt.size)
		}
		if [32]byte(h.Sum(nil)) != ObjectSHA256(tt.size) {
			t.Errorf("GET %s: body sha256 differs from ObjectSHA256(%d)", tt.path, tt.size)
		}
		if got := resp.Header.Get("X-Origin-Name"); got != "origin-a" {
			t.Errorf("GET %s: X-Origin-Name %q, want origin-a", tt.path, got)
		}
	}
	if ObjectSHA256(1000) == ObjectSHA256(1001) {
		t.Error("objects of different sizes have the same digest")
	}
	// Every request above reused one keep-alive connection.
	if st := s.Stats()[HTTP]; st.Accepted != 1 || st.Requests != 6 {
		t.Errorf("stats = %+v, want 6 requests on 1 connection", st)
	}
}

func TestHTTPHealthAndErrors(t *testing.T) {
	testenv.NoGoroutineLeaks(t)
	s := newServer(t)
	base := "http://" + serve(t, s, HTTP)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	for path, want := range map[string]int{
		"/health":        http.StatusOK,
		"/obj/12parsecs": http.StatusBadRequest,
		"/obj/2TiB":      http.StatusBadRequest,
		"/nothing":       http.StatusNotFound,
	} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: status %d, want %d", path, resp.StatusCode, want)
		}
		if resp.Header.Get("X-Origin-Name") != "" {
			t.Errorf("GET %s: X-Origin-Name set without WithName", path)
		}
	}
	resp, err := client.Head(base + "/obj/5000")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ContentLength != 5000 {
		t.Errorf("HEAD /obj/5000: Content-Length %s, want 5000", strconv.FormatInt(resp.ContentLength, 10))
	}
}

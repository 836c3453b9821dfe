// Tests of the nginx origin: the built-in origin's bytes, from files where it has them.

package bench

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"github.com/splicer/splicer/origin"
)

// TestNginxOriginServesTheBuiltinsBytes checks that nginx serves the
// objects ServeObjects wrote as files (nginx's ETag says so) and passes
// the other sizes to the built-in origin, with the same bytes either way.
func TestNginxOriginServesTheBuiltinsBytes(t *testing.T) {
	if why := missing("nginx"); why != "" {
		t.Skip(why)
	}
	e := newOriginOnlyEnv(t)
	a := addressing{server: "127.0.0.3"} // a loopback address no other test listens on
	if err := e.startOrigin(local{}, a); err != nil {
		t.Fatal(err)
	}
	addr, note := e.startNginxOrigin(context.Background(), a)
	if e.objectDir == "" {
		t.Fatalf("nginx origin not started: %s", note)
	}
	const fromFile, fromFile2, builtin = 1024, 3 << 20, 5000
	if err := e.ServeObjects([]int64{fromFile, fromFile2}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fromFile, fromFile2, builtin} {
		resp, err := http.Get("http://" + addr + origin.ObjectPath(size))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != size {
			t.Fatalf("GET %d bytes: status %d, %d bytes, %v", size, resp.StatusCode, n, err)
		}
		if [32]byte(h.Sum(nil)) != origin.ObjectSHA256(size) {
			t.Errorf("GET %d bytes: not the built-in origin's object", size)
		}
		if file := resp.Header.Get("Etag") != ""; file != (size != builtin) {
			t.Errorf("GET %d bytes: served from a file = %v, want %v", size, file, size != builtin)
		}
	}
}

// newOriginOnlyEnv is an Env with nothing running yet, for starting
// origins alone; its processes and files go when tb ends.
func newOriginOnlyEnv(tb testing.TB) *Env {
	tb.Helper()
	dir, err := os.MkdirTemp("", "splicer-bench-test-") // under /tmp: nginx's workers can reach it
	if err != nil {
		tb.Fatal(err)
	}
	_, cancel := context.WithCancel(context.Background())
	e := &Env{dir: dir, server: local{}, Client: local{}, cancel: cancel, log: slog.New(slog.DiscardHandler)}
	tb.Cleanup(func() { e.Close() })
	return e
}

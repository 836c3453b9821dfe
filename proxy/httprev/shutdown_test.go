// Graceful shutdown: an idle keep-alive client connection is closed when shutdown begins, not when its grace period ends.

package httprev_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
)

func TestLabShutdownClosesIdleKeepAlive(t *testing.T) {
	l := httplab.New(t)
	const originPort, port = 9601, 8601
	httplab.ServeOrigin(t, l, httplab.ServerAddr(l, originPort))
	lc := httplab.Listener("rev", httplab.FwdAddr(l, port), "http-reverse")
	lc.Pools = []config.Pool{{Name: "o", Servers: config.Servers(httplab.ServerAddr(l, originPort))}}
	lc.Routes = []config.Route{{Pool: "o"}}
	f := httplab.Start(t, l, lc)

	c := httplab.Dial(t, l, httplab.FwdAddr(l, port))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", origin.ObjectPath(1000))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// The connection is now idle between requests; a 10 s grace period must
	// not be spent waiting for it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (an idle keep-alive pair held it)", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Shutdown took %v with one idle keep-alive pair", took)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("idle keep-alive connection still open after shutdown (read %d, %v)", n, err)
	}
}

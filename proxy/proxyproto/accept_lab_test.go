// Lab test of accept_proxy_protocol: HAProxy with send-proxy-v2 in front of an http-reverse listener, whose origin must see the real client in Forwarded; a header from an untrusted source, and a trusted source without one, reach nothing.

package proxyproto_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/lab"
)

// recorder is an origin that keeps the Forwarded and X-Forwarded-For
// fields of every request it is sent.
type recorder struct {
	mu        sync.Mutex
	forwarded []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.forwarded = append(r.forwarded, req.Header.Get("Forwarded")+" | "+req.Header.Get("X-Forwarded-For"))
	r.mu.Unlock()
	io.WriteString(w, "ok")
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.forwarded...)
}

// startHAProxy runs HAProxy in the lab's forwarder namespace, in TCP mode
// as a cloud balancer is, accepting on listen and sending each
// connection to server with a PROXY v2 header. It returns once listen
// accepts from the client namespace.
func startHAProxy(tb testing.TB, l *lab.Lab, listen, server string) {
	tb.Helper()
	dir := tb.TempDir()
	cfg := fmt.Sprintf(`global
  log stderr format short local0 err
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
listen balancer
  bind %s
  server s %s send-proxy-v2
`, listen, server)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	httplab.StartDaemon(tb, l.Fwd, l.Client, listen, nil, "haproxy", "-db", "-f", path)
}

func TestLabAcceptFromHAProxy(t *testing.T) {
	l := httplab.New(t)
	const originPort, listenPort, haproxyPort = 8002, 7201, 7202
	rec := &recorder{}
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, originPort), rec)
	lc := httplab.Listener("behind-lb", httplab.FwdAddr(l, listenPort), "http-reverse")
	lc.Routes = []config.Route{{Pool: "origin"}}
	lc.Pools = []config.Pool{{Name: "origin", Servers: config.Servers(httplab.ServerAddr(l, originPort))}}
	lc.AcceptProxyProtocol = true
	balancer := l.Cfg.FwdClient.Addr().String() // HAProxy's connections come from the forwarder's address
	lc.ProxyProtocolFrom = []string{balancer + "/32"}
	f := httplab.Start(t, l, lc)
	listen := f.Addr(lc.Name).String()
	// refused checks that c was closed without an answer, that nothing
	// reached the origin, and that the close was counted under reason.
	refused := func(t *testing.T, c io.Reader, reason string) {
		t.Helper()
		if got, _ := io.ReadAll(c); len(got) != 0 {
			t.Errorf("got the answer %q, want the connection closed", got)
		}
		if n := len(rec.requests()); n != 0 {
			t.Errorf("the origin was sent %d requests, want 0", n)
		}
		if n := f.Metric("splicer_connections_closed_total", "listener", lc.Name, "reason", reason); n != 1 {
			t.Errorf("closed{reason=%s} = %v, want 1", reason, n)
		}
	}

	t.Run("untrusted source with a header is refused", func(t *testing.T) {
		c := httplab.Dial(t, l, listen)
		c.SetDeadline(time.Now().Add(httplab.WaitFor))
		fmt.Fprintf(c, "PROXY TCP4 203.0.113.7 %s 1234 %d\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", l.Cfg.FwdClient.Addr(), listenPort)
		refused(t, c, "proxy_protocol_untrusted")
	})

	t.Run("trusted source without a header is refused", func(t *testing.T) {
		c := dialFrom(t, l.Fwd, listen)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		refused(t, c, "proxy_protocol_invalid")
	})

	t.Run("through HAProxy the origin sees the client", func(t *testing.T) {
		hp := httplab.FwdAddr(l, haproxyPort)
		startHAProxy(t, l, hp, listen)
		before := len(rec.requests())
		if out, err := httplab.Curl(t, l, "-f", "http://"+hp+"/"); err != nil || string(out) != "ok" {
			t.Fatalf("curl through HAProxy: %q, %v", out, err)
		}
		got := rec.requests()[before:]
		client := httplab.ClientIP(l)
		want := fmt.Sprintf("for=%s;proto=http;host=%q | %s", client, hp, client)
		if len(got) != 1 || got[0] != want {
			t.Fatalf("the origin read Forwarded | X-Forwarded-For %q; want %q, the client and not the balancer %s", got, want, balancer)
		}
		t.Logf("origin read: %s", got[0])
	})

	t.Run("untrusted source without a header is served as itself", func(t *testing.T) {
		before := len(rec.requests())
		if out, err := httplab.Curl(t, l, "-f", "http://"+listen+"/"); err != nil || string(out) != "ok" {
			t.Fatalf("curl direct: %q, %v", out, err)
		}
		if got := rec.requests()[before:]; len(got) != 1 || !strings.HasPrefix(got[0], "for="+httplab.ClientIP(l)+";") {
			t.Errorf("the origin read %q, want for=%s", got, httplab.ClientIP(l))
		}
	})
}

// dialFrom connects from ns to addr, with a deadline, closed at the end
// of the test.
func dialFrom(tb testing.TB, ns *lab.NS, addr string) io.ReadWriteCloser {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), httplab.WaitFor)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", addr)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	tb.Cleanup(func() { c.Close() })
	return c
}

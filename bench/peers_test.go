// The switch peers' configurations, run against a server that records what they forward: they add what splicer's http-reverse adds.

package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

// TestSwitchPeersForwardTheClient runs HAProxy (haproxySwitch) and nginx
// (nginxConfig) on loopback in front of a server that records the request
// it gets, and sends a request carrying forged forwarding fields: each
// peer must replace them with the client's, as http-reverse does for a
// client it does not trust, and pass Host on.
func TestSwitchPeersForwardTheClient(t *testing.T) {
	for _, peer := range []string{"haproxy", "nginx"} {
		t.Run(peer, func(t *testing.T) {
			if _, err := exec.LookPath(peer); err != nil {
				t.Skipf("%s not installed", peer)
			}
			got := make(chan http.Header, 1)
			origin := serveRecorded(t, got)
			listen := testenv.FreeAddr(t)
			startPeer(t, peer, origin, listen)
			req, err := http.NewRequest("GET", "http://"+listen+"/obj/1", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "example.test"
			req.Header.Set("Forwarded", "for=192.0.2.9")
			req.Header.Set("X-Forwarded-For", "192.0.2.9")
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "evil.test")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := <-got
			want := map[string]string{
				"Host":              "example.test",
				"Forwarded":         `for=127.0.0.1;proto=http;host="example.test"`,
				"X-Forwarded-For":   "127.0.0.1",
				"X-Forwarded-Proto": "http",
				"X-Forwarded-Host":  "",
			}
			for name, v := range want {
				if g := h.Values(name); (v == "" && len(g) != 0) || (v != "" && (len(g) != 1 || g[0] != v)) {
					t.Errorf("%s: %s = %q, want %q", peer, name, g, v)
				}
			}
		})
	}
}

// serveRecorded serves on loopback, sending each request's header (with
// its Host) to got, and returns its address.
func serveRecorded(tb testing.TB, got chan<- http.Header) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		select {
		case got <- h:
		default:
		}
		w.Write([]byte("x"))
	})}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// startPeer runs haproxy or nginx with the bench's switch configuration
// from origin to listen until the test ends, and waits until it listens.
func startPeer(tb testing.TB, peer, origin, listen string) {
	tb.Helper()
	dir := tb.TempDir()
	var cmd *exec.Cmd
	switch peer {
	case "haproxy":
		cfg := "global\n  log stderr format short local0 err\ndefaults\n  timeout connect 5s\n  timeout client 1m\n  timeout server 1m\n" + haproxySwitch(listen, origin, 1)
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			tb.Fatal(err)
		}
		cmd = exec.Command("haproxy", "-db", "-f", path)
	case "nginx":
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(nginxConfig(dir, origin, listen)), 0o644); err != nil {
			tb.Fatal(err)
		}
		cmd = exec.Command("nginx", "-c", path, "-p", dir)
	}
	out, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A group of its own, killed whole: nginx's worker outlives a killed
	// master otherwise.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		out.Close()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", listen)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			tb.Fatal(fmt.Sprintf("%s did not listen on %s: %v: %s", peer, listen, err, log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

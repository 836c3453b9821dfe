// Interoperability in the lab: curl through tcp listeners with proxy_protocol v1 and v2, over IPv4 and IPv6, to an nginx that accepts the header and echoes the addresses it read.

package proxyproto_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/proxy/httpcore/httplab"
)

// nginxConf answers every request with the PROXY protocol addresses nginx
// parsed: "client-addr client-port server-addr server-port".
func nginxConf(dir string, port int) string {
	return fmt.Sprintf(`master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[1]s/tmp;
	proxy_temp_path %[1]s/tmp;
	fastcgi_temp_path %[1]s/tmp;
	uwsgi_temp_path %[1]s/tmp;
	scgi_temp_path %[1]s/tmp;
	server {
		listen %[2]d proxy_protocol;
		listen [::]:%[2]d proxy_protocol;
		return 200 "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port";
	}
}
`, dir, port)
}

// startNginx runs nginx in the lab's server namespace until the test ends.
func startNginx(tb testing.TB, l *lab.Lab, port int) {
	tb.Helper()
	if _, err := exec.LookPath("nginx"); err != nil {
		testenv.SkipOrFail(tb, "nginx is not installed")
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(nginxConf(dir, port)), 0o644); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := l.Server.Command(ctx, "nginx", "-p", dir, "-e", filepath.Join(dir, "error.log"),
		"-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		cancel()
		<-exited
		if tb.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			tb.Logf("nginx error log:\n%s", log)
		}
	})
	addr := fmt.Sprintf("10.99.2.2:%d", port)
	deadline := time.Now().Add(httplab.WaitFor)
	for {
		select {
		case err := <-exited:
			tb.Fatalf("nginx exited: %v", err)
		default:
		}
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		c, err := l.Server.Dial(dctx, "tcp", addr)
		dcancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nginx not listening on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLabNginxReadsHeader(t *testing.T) {
	l := httplab.New(t)
	const nginxPort = 8001
	startNginx(t, l, nginxPort)
	cases := []struct {
		name, version, listen, upstream, client string
	}{
		{"v1-ipv4", "v1", "10.99.1.1:7101", "10.99.2.2", "10.99.1.2"},
		{"v2-ipv4", "v2", "10.99.1.1:7102", "10.99.2.2", "10.99.1.2"},
		{"v1-ipv6", "v1", "[fd99:1::1]:7103", "[fd99:2::2]", "fd99:1::2"},
		{"v2-ipv6", "v2", "[fd99:1::1]:7104", "[fd99:2::2]", "fd99:1::2"},
	}
	var listeners []config.Listener
	for _, c := range cases {
		lc := httplab.Listener(c.name, c.listen, "tcp")
		lc.Upstream = []string{fmt.Sprintf("%s:%d", c.upstream, nginxPort)}
		lc.ProxyProtocol = c.version
		listeners = append(listeners, lc)
	}
	f := httplab.Start(t, l, listeners...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := httplab.Curl(t, l, "-f", "http://"+f.Addr(c.name).String()+"/")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("nginx read: %s", out)
			fields := strings.Fields(string(out))
			listen := netip.MustParseAddrPort(c.listen)
			if len(fields) != 4 || fields[0] != c.client || fields[1] == "0" ||
				fields[2] != listen.Addr().String() || fields[3] != fmt.Sprint(listen.Port()) {
				t.Errorf("nginx read the header as %q; want client %s, some port, server %s", out, c.client, listen)
			}
		})
	}
}

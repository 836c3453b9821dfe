// nginx as a reverse proxy peer for the switch experiments: proxy_pass to the switch experiments' origin with upstream keep-alive, as an nginx user would set it up.

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/splicer/splicer/internal/nginxconf"
)

// startNginx runs nginx in the forwarder namespace as an HTTP reverse
// proxy in front of the switch experiments' origin. It is a switch peer only
// (e.SwitchPeers): nginx is not a TCP forwarder for the other experiments.
func (e *Env) startNginx(ctx context.Context, a addressing) {
	t := &Target{Name: "nginx", Peer: true}
	e.SwitchPeers = append(e.SwitchPeers, t)
	if t.Unavailable = missing("nginx"); t.Unavailable != "" {
		return
	}
	t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(targetPorts["nginx"]+switchOffset))
	dir := filepath.Join(e.dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Unavailable = err.Error()
		return
	}
	cmd, err := e.runNginx(ctx, e.fwd, "nginx", dir, nginxConfig(dir, a.switchOrigin, t.switchAddr), t.switchAddr)
	if cmd != nil {
		t.pids = func() []int { return []int{cmd.Process.Pid} }
	}
	if err != nil {
		t.Unavailable = err.Error()
	}
}

// runNginx writes conf to dir/nginx.conf and runs nginx with it and its
// files in dir on h, its log named logName, until it listens on addr (see
// startListening).
func (e *Env) runNginx(ctx context.Context, h host, logName, dir, conf, addr string) (*exec.Cmd, error) {
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return e.startListening(ctx, h, logName, addr, "nginx", "-c", path, "-p", dir)
}

// nginxConfig runs one nginx worker, its files in dir, proxying listen to
// origin with upstream keep-alive. Like HAProxy's (haproxySwitch) it adds
// what splicer's http-reverse adds by default for a client it does not
// trust: the client's Host passed on, Forwarded (for, proto, host),
// X-Forwarded-For and X-Forwarded-Proto naming the client (the client's
// own replaced), X-Forwarded-Host dropped.
func nginxConfig(dir, origin, listen string) string {
	return nginxPreamble(dir) + fmt.Sprintf(`
	upstream origin { server %[1]s; keepalive 64; }
	server {
		listen %[2]s;
		location / {
			proxy_pass http://origin;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host $http_host;
			proxy_set_header Forwarded "for=$remote_addr;proto=$scheme;host=\"$http_host\"";
			proxy_set_header X-Forwarded-For $remote_addr;
			proxy_set_header X-Forwarded-Proto $scheme;
			proxy_set_header X-Forwarded-Host "";
			proxy_buffering on;
			proxy_max_temp_file_size 0;
		}
	}
}
`, origin, listen)
}

// nginxPreamble starts the configuration of one nginx worker in the
// foreground with its files in dir, up to the http block's contents:
// keep-alive connections that serve requests without end.
func nginxPreamble(dir string) string {
	return fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
	access_log off;
`, dir) + nginxconf.TempPaths(dir) + "\tkeepalive_requests 1000000;"
}

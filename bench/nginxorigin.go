// nginx as the origin of the HTTP switch experiments: the objects served from files with sendfile, as a web server behind a reverse proxy usually is.

package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/splicer/splicer/origin"
)

// staticPort is where nginx serves the switch experiments' objects;
// tlsOriginPort is where it serves them over TLS (the tls experiment).
const (
	staticPort    = originPort + int(numServices)
	tlsOriginPort = staticPort + 1
)

// startNginxOrigin runs nginx in the server namespace in front of the
// built-in origin's http service: GET /obj/<size> comes from a file when
// ServeObjects wrote one, anything else from the built-in origin. It
// returns where the switch experiments' proxies (and route) send their
// requests, and what serves them. The same objects are served over TLS at
// tlsOriginPort (e.tlsOrigin) with a certificate for tlsServerName made
// now (e.tlsFiles); without one, e.tlsOrigin stays empty.
//
// Why: the built-in origin is a Go net/http server that writes each body
// through user space. Under wrk at 1 KiB it takes ~80% of one of the two
// CPUs and caps even route at ~80k requests/s, where nginx serves 120k at
// half the CPU; a proxy's own cost then hardly shows in its rate. An
// nginx origin is also how the field measures a reverse proxy.
func (e *Env) startNginxOrigin(ctx context.Context, a addressing) (addr, note string) {
	builtin := a.originAddr(HTTP)
	instead := func(why string) (string, string) { return builtin, "the built-in Go origin (" + why + ")" }
	if why := missing("nginx"); why != "" {
		return instead(why)
	}
	dir := filepath.Join(e.dir, "nginx-origin")
	// nginx's workers run as nobody under root: they must reach the files.
	for _, d := range []string{e.dir, dir, filepath.Join(dir, "obj")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return instead(err.Error())
		}
		os.Chmod(d, 0o755)
	}
	addr = net.JoinHostPort(a.server, strconv.Itoa(staticPort))
	tlsAddr := net.JoinHostPort(a.server, strconv.Itoa(tlsOriginPort))
	files, err := writeSelfSigned(dir, tlsServerName)
	if err != nil {
		e.log.Warn("nginx origin without TLS", "err", err)
	}
	cmd, err := e.runNginx(ctx, e.server, "nginx-origin", dir, nginxOriginConfig(dir, builtin, addr, tlsAddr, files), addr)
	if err != nil {
		return instead(err.Error())
	}
	e.objectDir, e.originPids = filepath.Join(dir, "obj"), []int{cmd.Process.Pid}
	if files != nil {
		e.tlsOrigin, e.tlsFiles = tlsAddr, files
	}
	return addr, "nginx (static files, sendfile)"
}

// switchOriginNote has the switch experiments' origin serve the objects
// of sizes (ServeObjects) and returns the results' note saying what
// serves them.
func (e *Env) switchOriginNote(sizes []int64) (string, error) {
	if err := e.ServeObjects(sizes); err != nil {
		return "", err
	}
	return "origin: " + e.SwitchOrigin, nil
}

// nginxOriginConfig runs one nginx worker, its files in dir, serving the
// files under dir/obj on listen and passing any other request to builtin;
// with files, the same over TLS 1.2 and 1.3 on tlsListen (nginx 1.22
// leaves 1.3 out unless asked).
func nginxOriginConfig(dir, builtin, listen, tlsListen string, files *tlsFiles) string {
	cfg := nginxPreamble(dir) + fmt.Sprintf(`
	sendfile on;
	tcp_nopush on;
	keepalive_timeout 1h;
	types { }
	default_type application/octet-stream;
	upstream builtin { server %[1]s; keepalive 64; }
`, builtin) + nginxOriginServer(dir, listen)
	if files != nil {
		cfg += nginxOriginServer(dir, tlsListen+" ssl;\n\t\tssl_certificate "+files.cert+";\n\t\tssl_certificate_key "+files.key+
			";\n\t\tssl_protocols TLSv1.2 TLSv1.3")
	}
	return cfg + "}\n"
}

// nginxOriginServer is the origin's server block on listen (the rest of
// the listen directive included).
func nginxOriginServer(dir, listen string) string {
	return fmt.Sprintf(`	server {
		listen %[2]s;
		root %[1]s;
		location /obj/ { try_files $uri @builtin; }
		location / { try_files /nonexistent @builtin; }
		location @builtin {
			proxy_pass http://builtin;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
`, dir, listen)
}

// ServeObjects has the switch experiments' origin serve the objects of
// sizes from files, the same bytes as the built-in origin's. Without the
// nginx origin it does nothing: the built-in origin makes every size.
func (e *Env) ServeObjects(sizes []int64) error {
	if e.objectDir == "" {
		return nil
	}
	for _, size := range sizes {
		path := filepath.Join(e.objectDir, strconv.FormatInt(size, 10))
		if st, err := os.Stat(path); err == nil && st.Size() == size {
			continue
		}
		if err := writeObjectFile(path, size); err != nil {
			return fmt.Errorf("object of %d bytes for the nginx origin: %w", size, err)
		}
	}
	return nil
}

// writeObjectFile writes the object of size bytes to path, whole or not at
// all: nginx must never serve a file being written.
func writeObjectFile(path string, size int64) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = origin.WriteObject(f, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

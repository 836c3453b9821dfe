// StartNginx: a real nginx in the lab's server namespace, for tests that need the field's own server as the far end.

package httplab

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/splicer/splicer/internal/nginxconf"
	"github.com/splicer/splicer/lab"
)

// StartNginx runs nginx in l's server namespace until the test ends, with
// server as the inside of its one server block (in which %[1]s is dir),
// and returns once addr, in the server namespace, accepts connections.
// nginx keeps its pid, logs and temporary files in dir. It is one
// foreground process (master_process off) running as root, so that it
// reads the test's private temporary directory. Without nginx installed
// the test is skipped, or fails where tools are required.
func StartNginx(tb testing.TB, l *lab.Lab, dir, server, addr string) {
	tb.Helper()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConf(dir, server)), 0o644); err != nil {
		tb.Fatal(err)
	}
	errorLog := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(b)
	}
	StartDaemon(tb, l.Server, l.Server, addr, errorLog,
		"nginx", "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", conf, "-g", "daemon off;")
}

// nginxConf is a configuration whose paths all lie in dir, around server.
func nginxConf(dir, server string) string {
	return fmt.Sprintf(`master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
	access_log off;
%[2]s	server {
`+server+`
	}
}
`, dir, nginxconf.TempPaths(dir))
}

// waitAccepting returns once addr accepts a connection from ns, failing

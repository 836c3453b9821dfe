// splicer upstreams against a running forwarder's admin endpoint: a table of its back-end servers, a dead one shown skipped.

package main

import (
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
)

// TestUpstreamsCommand: through a tcp listener in front of a dead and a
// live server, one connection meets the dead one (max_fails 1); `splicer
// upstreams --admin` then prints both, the dead one skipped with one
// failure, and --json the endpoint's JSON.
func TestUpstreamsCommand(t *testing.T) {
	live, dead := fwdtest.Echo(t), fwdtest.FreeAddr(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: plug, listen: '127.0.0.1:0', proxy: tcp, engine: copy, upstream: ['%s', '%s']}
`, dead, live)))
	if err != nil {
		t.Fatal(err)
	}
	f := fwdtest.Start(t, cfg.Listeners...)
	srv, err := admin.Start("127.0.0.1:0", f, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", f.Addr("plug").String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "x")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("echo through the live server: %v", err)
	}
	c.Close()

	out, stderr, code := splicer(t, "upstreams", "--admin", srv.Addr().String())
	if code != 0 {
		t.Fatalf("splicer upstreams: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`(?m)^LISTENER +POOL +SERVER +HEALTHY +SKIPPED +FAILURES$`,
		`(?m)^plug +upstream +` + regexp.QuoteMeta(dead) + ` +yes +yes +1$`,
		`(?m)^plug +upstream +` + regexp.QuoteMeta(live) + ` +yes +no +0$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("splicer upstreams printed no line matching %s:\n%s", want, out)
		}
	}
	out, _, code = splicer(t, "upstreams", "--admin", srv.Addr().String(), "--json")
	if code != 0 || !strings.Contains(out, `"skipped": true`) {
		t.Errorf("splicer upstreams --json: exit %d:\n%s", code, out)
	}
}

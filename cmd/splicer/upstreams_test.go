// splicer upstreams against a running forwarder's admin endpoint: a table of its back-end servers, a dead one shown skipped; draining one and making it ready again.

package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// countingEchoes are two echo servers on loopback, their addresses and
// how many connections each accepted.
func countingEchoes(tb testing.TB) (addrs [2]string, accepted *[2]atomic.Int64) {
	tb.Helper()
	accepted = new([2]atomic.Int64)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		testenv.ServeEach(tb, ln, time.Minute, func(c net.Conn) {
			accepted[i].Add(1)
			io.Copy(c, c)
		})
		addrs[i] = ln.Addr().String()
	}
	return addrs, accepted
}

// plugWithAdmin starts a forwarder with a tcp listener "plug" in front of
// upstreams, and its admin endpoint; it returns both addresses.
func plugWithAdmin(tb testing.TB, upstreams ...string) (plug, adminAddr string) {
	tb.Helper()
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: plug, listen: '127.0.0.1:0', proxy: tcp, engine: copy, upstream: ['%s']}
`, strings.Join(upstreams, "', '"))))
	if err != nil {
		tb.Fatal(err)
	}
	f := fwdtest.Start(tb, cfg.Listeners...)
	srv, err := admin.Start("127.0.0.1:0", f, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	return f.Addr("plug").String(), srv.Addr().String()
}

// TestUpstreamsCommand: through a tcp listener in front of a dead and a
// live server, one connection meets the dead one (max_fails 1); `splicer
// upstreams --admin` then prints both, the dead one skipped with one
// failure, and --json the endpoint's JSON.
func TestUpstreamsCommand(t *testing.T) {
	splicerBinary(t) // built first: the skip lasts fail_timeout (10s) only
	live, dead := fwdtest.Echo(t), testenv.FreeAddr(t)
	plug, adminAddr := plugWithAdmin(t, dead, live)
	c, err := net.Dial("tcp", plug)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(c, "x")
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("echo through the live server: %v", err)
	}
	c.Close()

	out, stderr, code := splicer(t, "upstreams", "--admin", adminAddr)
	if code != 0 {
		t.Fatalf("splicer upstreams: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`(?m)^LISTENER +POOL +SERVER +HEALTHY +SKIPPED +FAILURES +DRAINED +BACKUP +ACTIVE$`,
		`(?m)^plug +upstream +` + regexp.QuoteMeta(dead) + ` +yes +yes +1 +no +no +0$`,
		`(?m)^plug +upstream +` + regexp.QuoteMeta(live) + ` +yes +no +0 +no +no +0$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("splicer upstreams printed no line matching %s:\n%s", want, out)
		}
	}
	out, _, code = splicer(t, "upstreams", "--admin", adminAddr, "--json")
	if code != 0 || !strings.Contains(out, `"skipped": true`) {
		t.Errorf("splicer upstreams --json: exit %d:\n%s", code, out)
	}
}

// TestDrainingAServer: `splicer upstreams --drain` takes one of a tcp
// listener's two servers out of rotation: a connection it carries goes on
// echoing, the next four connections all reach the other server, the
// table says drained; --ready puts it back, and the next two connections
// reach each server once. A server no listener has is refused with a
// message.
func TestDrainingAServer(t *testing.T) {
	addrs, accepted := countingEchoes(t)
	plug, adminAddr := plugWithAdmin(t, addrs[0], addrs[1])
	echo := func(c net.Conn) {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("no echo: %v", err)
		}
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", plug)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		echo(c)
		return c
	}
	dial().Close() // the first server
	held := dial() // the second, held open across the drain

	drained := regexp.MustCompile(`(?m)^plug +upstream +` + regexp.QuoteMeta(addrs[1]) + ` +yes +no +0 +yes +no +1$`)
	out, stderr, code := splicer(t, "upstreams", "--admin", adminAddr, "--drain", addrs[1])
	if code != 0 || !drained.MatchString(out) {
		t.Fatalf("splicer upstreams --drain: exit %d, want the server's line saying drained: %s%s", code, out, stderr)
	}
	echo(held)
	counts := func() [2]int64 { return [2]int64{accepted[0].Load(), accepted[1].Load()} }
	before := counts()
	for range 4 {
		dial().Close()
	}
	if a, b := counts()[0]-before[0], counts()[1]-before[1]; a != 4 || b != 0 {
		t.Errorf("with the second server drained, 4 connections reached the servers %d and %d times, want 4 and 0", a, b)
	}
	if out, _, _ = splicer(t, "upstreams", "--admin", adminAddr); !drained.MatchString(out) {
		t.Errorf("splicer upstreams printed no line matching %s:\n%s", drained, out)
	}

	if _, stderr, code := splicer(t, "upstreams", "--admin", adminAddr, "--ready", addrs[1], "--listener", "plug", "--pool", "upstream"); code != 0 {
		t.Fatalf("splicer upstreams --ready: exit %d: %s", code, stderr)
	}
	before = counts()
	for range 2 {
		dial().Close()
	}
	if a, b := counts()[0]-before[0], counts()[1]-before[1]; a != 1 || b != 1 {
		t.Errorf("with both servers ready, 2 connections reached them %d and %d times, want 1 and 1", a, b)
	}

	_, stderr, code = splicer(t, "upstreams", "--admin", adminAddr, "--drain", "192.0.2.1:80")
	if code == 0 || !strings.Contains(stderr, "no running listener has back-end server 192.0.2.1:80") {
		t.Errorf("draining a server no listener has: exit %d, stderr %q", code, stderr)
	}
}

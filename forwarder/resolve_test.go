// An upstream given by name with resolve follows its DNS record without a restart: two origins on 127.0.0.1 and 127.0.0.2 behind one name, the record switched from one to the other, then the name server failing.

package forwarder_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxytest"
)

// namedOrigins listens on 127.0.0.1 and 127.0.0.2 at one port until tb
// ends, each connection greeted with the origin's name on a line, then
// echoed. It returns the port.
func namedOrigins(tb testing.TB) int {
	tb.Helper()
	for range 20 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
		if err != nil {
			a.Close() // the port is taken on 127.0.0.2: another
			continue
		}
		for _, ln := range []net.Listener{a, b} {
			name := ln.Addr().(*net.TCPAddr).IP.String()
			testenv.ServeEach(tb, ln, time.Minute, func(c net.Conn) {
				fmt.Fprintln(c, name)
				io.Copy(c, c)
			})
		}
		return port
	}
	tb.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return 0
}

// greeting connects to addr and reads the origin's name; the connection
// stays open for the caller.
func greeting(tb testing.TB, addr string) (string, net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		tb.Fatalf("no greeting through the forwarder: %v", err)
	}
	return line[:len(line)-1], c, r
}

func TestUpstreamNameFollowsItsRecord(t *testing.T) {
	port := namedOrigins(t)
	dns := proxytest.NewDNS(t)
	dns.SetAddrs("origin.splicer.test", "127.0.0.1")
	name := net.JoinHostPort("origin.splicer.test", strconv.Itoa(port))
	cfg, err := config.Parse("test.yaml", fmt.Appendf(nil, `
listeners:
  - name: t
    listen: '127.0.0.1:0'
    engine: copy
    upstream: [{address: '%s', resolve: true}]
    resolver: {nameservers: ['%s'], interval: 1s}
`, name, dns.Addr))
	if err != nil {
		t.Fatal(err)
	}
	f := fwdtest.StartConfig(t, cfg, forwarder.Options{})
	addr := f.Addr("t").String()

	got, old, oldR := greeting(t, addr)
	if got != "127.0.0.1" {
		t.Fatalf("first connection reached %s, want 127.0.0.1, the record's address", got)
	}
	dns.SetAddrs("origin.splicer.test", "127.0.0.2")
	testenv.Eventually(t, "a connection reaching 127.0.0.2 after the record switched (interval 1s)", func() bool {
		got, c, _ := greeting(t, addr)
		c.Close()
		return got == "127.0.0.2"
	})
	for range 5 {
		if got, c, _ := greeting(t, addr); got != "127.0.0.2" {
			t.Fatalf("a connection reached %s after the record switched to 127.0.0.2", got)
		} else {
			c.Close()
		}
	}
	old.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Write([]byte("still here\n")); err != nil {
		t.Fatal(err)
	}
	if echo, err := oldR.ReadString('\n'); echo != "still here\n" {
		t.Errorf("the connection to 127.0.0.1 made before the switch: echo %q, err %v; want it carried on", echo, err)
	}

	dns.Fail(true)
	labels := []string{"listener", "t", "pool", "upstream", "name", name}
	testenv.Eventually(t, "failed lookups counted", func() bool {
		return fwdtest.Metric(f, "splicer_upstream_resolve_failures_total", labels...) >= 2
	})
	if got, _, _ := greeting(t, addr); got != "127.0.0.2" {
		t.Errorf("while the name server fails, a connection reached %s, want 127.0.0.2, the last address", got)
	}
	var servers []string
	for _, u := range f.Upstreams() {
		servers = append(servers, u.Server+" from "+u.ResolvedFrom)
	}
	if want := []string{fmt.Sprintf("127.0.0.2:%d from %s", port, name)}; !slices.Equal(servers, want) {
		t.Errorf("/upstreams lists %q, want %q", servers, want)
	}
	if n, ok := fwdtest.Series(f, "splicer_upstream_resolved_addresses", labels...); !ok || n != 1 {
		t.Errorf("splicer_upstream_resolved_addresses %v, want 1", n)
	}
}

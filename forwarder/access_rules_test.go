// Client rules at accept: a denied client and a client past its per-IP cap are closed at once and counted; others are served; a listener open to all as a proxy is warned of at start.

package forwarder_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/socks5/passwd"
)

// closedAtOnce reports whether the forwarder closed c without serving it.
func closedAtOnce(tb testing.TB, c net.Conn) bool {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestClientRules(t *testing.T) {
	up := fwdtest.Echo(t)
	denied := loopListener("denied", "127.0.0.1:0", up, copyengine.Name)
	denied.DenyClients = []string{"127.0.0.0/8"}
	capped := loopListener("capped", "127.0.0.1:0", up, copyengine.Name)
	capped.MaxConnectionsPerClient = 1
	f := fwdtest.Start(t, denied, capped)

	c, err := net.Dial("tcp", f.Addr("denied").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedAtOnce(t, c) {
		t.Error("a denied client was not closed at once")
	}

	first, err := net.Dial("tcp", f.Addr("capped").String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	roundTrip(t, first, []byte("first"))
	second, err := net.Dial("tcp", f.Addr("capped").String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !closedAtOnce(t, second) {
		t.Error("a second connection past max_connections_per_client 1 was served")
	}
	first.Close()
	testenv.Eventually(t, "the client's slot to free up", func() bool {
		c, err := net.Dial("tcp", f.Addr("capped").String())
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write([]byte("x"))
		b := make([]byte, 1)
		_, err = io.ReadFull(c, b)
		return err == nil
	})
	for reason, want := range map[string]float64{"client_denied": 1, "max_connections_per_client": 1} {
		if n := closedCount(f, reason); n < want {
			t.Errorf("splicer_connections_closed_total{reason=%q} = %v, want %v", reason, n, want)
		}
	}
}

// closedCount reads splicer_connections_closed_total for reason, summed over listeners.
func closedCount(f *forwarder.Forwarder, reason string) float64 {
	return forwarder.CounterSum(f, "splicer_connections_closed_total", "reason", reason)
}

// A listener whose clients name the destination, open to every client and
// without credentials, is an open proxy: the forwarder says so at start,
// once per such listener, and not for one with allow_clients or users.
func TestOpenProxyWarning(t *testing.T) {
	hash, err := passwd.New("wonderland", passwd.MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("test.yaml", []byte(`
listeners:
  - {name: fwd-open, listen: '127.0.0.1:0', proxy: http-forward}
  - {name: socks-open, listen: '127.0.0.1:0', proxy: socks5, socks5: {auth: none}, deny_clients: ['10.6.6.6']}
  - {name: fwd-closed, listen: '127.0.0.1:0', proxy: http-forward, allow_clients: ['127.0.0.0/8']}
  - {name: socks-users, listen: '127.0.0.1:0', proxy: socks5, socks5: {users: [{name: alice, password_hash: '`+hash+`'}]}}
  - {name: tcp, listen: '127.0.0.1:0', upstream: ['`+fwdtest.Echo(t)+`']}
`))
	if err != nil {
		t.Fatal(err)
	}
	buf := &testenv.Buffer{}
	fwdtest.StartWith(t, forwarder.Options{Log: slog.New(slog.NewJSONHandler(buf, nil))}, cfg.Listeners...)
	warned := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == "WARN" && strings.HasPrefix(rec["msg"].(string), "open proxy") {
			warned[rec["listener"].(string)]++
		}
	}
	want := map[string]int{"fwd-open": 1, "socks-open": 1}
	if !maps.Equal(warned, want) {
		t.Errorf("open proxy warnings per listener: %v, want %v (log:\n%s)", warned, want, buf)
	}
}

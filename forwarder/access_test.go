// The access log: one line per closed pair with who, where, which engine, how much, how long and why it closed, in each format.

package forwarder_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/accesslog"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// onePairLogged runs one tcp pair through a listener with an access log
// in format (5 bytes each way) and returns the log once it has a line,
// the client's and the upstream's addresses.
func onePairLogged(tb testing.TB, format string) (log, client, up string) {
	tb.Helper()
	up = fwdtest.Echo(tb)
	cfg := config.Default()
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = "t", "127.0.0.1:0", config.Servers(up), pipe.Name
	cfg.Listeners = []config.Listener{l}
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	buf := &testenv.Buffer{}
	a, err := accesslog.New(buf, format)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := forwarder.New(&cfg, forwarder.Options{AccessLog: a})
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Shutdown(canceledCtx()) })

	c, err := net.Dial("tcp", f.Addr("t").String())
	if err != nil {
		tb.Fatal(err)
	}
	io.WriteString(c, "hello")
	c.(*net.TCPConn).CloseWrite()
	io.ReadAll(c)
	client = c.LocalAddr().String()
	c.Close()
	testenv.Eventually(tb, "an access log line", func() bool { return strings.HasSuffix(buf.String(), "\n") })
	return buf.String(), client, up
}

func TestAccessLogLinePerPair(t *testing.T) {
	log, client, up := onePairLogged(t, accesslog.JSON)
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(log)), &line); err != nil {
		t.Fatalf("access log %q: %v", log, err)
	}
	want := map[string]any{"type": "pair", "listener": "t", "proxy": "tcp", "client": client, "upstream": up,
		"engine": pipe.Name, "bytes_up": float64(5), "bytes_down": float64(5), "reason": "eof",
		"status": float64(200), "method": "", "request_id": ""}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("access log %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if d, ok := line["duration_s"].(float64); !ok || d <= 0 {
		t.Errorf("access log duration_s = %v", line["duration_s"])
	}
}

// TestAccessLogTextKeepsItsLines: the default format writes the
// key=value lines it always has.
func TestAccessLogTextKeepsItsLines(t *testing.T) {
	log, client, up := onePairLogged(t, accesslog.Text)
	for _, want := range []string{"msg=pair", "listener=t", "client=" + client, "upstream=" + up,
		"engine=" + pipe.Name, "bytes_up=5", "bytes_down=5", "reason=eof"} {
		if !strings.Contains(log, want) {
			t.Errorf("text access log %q lacks %s", log, want)
		}
	}
}

// TestAccessLogCombinedPair: a tcp pair in the combined format is a
// CONNECT to its upstream, as documented, with the bytes sent back.
func TestAccessLogCombinedPair(t *testing.T) {
	log, _, up := onePairLogged(t, accesslog.Combined)
	want := fmt.Sprintf(`"CONNECT %s tcp" 200 5 "-" "-"`, up)
	if !strings.HasPrefix(log, "127.0.0.1 - - [") || !strings.HasSuffix(log, want+"\n") {
		t.Errorf("combined access log %q, want 127.0.0.1 - - [time] %s", log, want)
	}
}

// canceledCtx is a context that is already done: no grace period.
func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestAccessLogKeepsPairsOutOfTheInfoLog: with an access log, the
// forwarder's own log at info gets no line per pair (the access log is
// the per-pair record, and a churn of short connections must not write
// the daemon's log a line each); without one, each pair's closing line
// stays at info.
func TestAccessLogKeepsPairsOutOfTheInfoLog(t *testing.T) {
	for _, withAccess := range []bool{true, false} {
		daemon, access := &testenv.Buffer{}, &testenv.Buffer{}
		opts := forwarder.Options{Log: slog.New(slog.NewTextHandler(daemon, &slog.HandlerOptions{Level: slog.LevelInfo}))}
		if withAccess {
			a, err := accesslog.New(access, "text")
			if err != nil {
				t.Fatal(err)
			}
			opts.AccessLog = a
		}
		f, addr := startEchoForwarder(t, opts)
		const pairs = 3
		clients := make([]string, pairs)
		for i := range clients {
			clients[i] = echoedClient(t, addr)
		}
		f.Shutdown(context.Background()) // every pair closed and logged
		for _, client := range clients {
			inDaemon := strings.Contains(daemon.String(), client)
			switch {
			case withAccess && inDaemon:
				t.Errorf("with an access log, the info log has a line about pair %s:\n%s", client, daemon)
			case withAccess && !strings.Contains(access.String(), "client="+client):
				t.Errorf("the access log has no line for pair %s:\n%s", client, access)
			case !withAccess && !inDaemon:
				t.Errorf("without an access log, the info log has no line for pair %s:\n%s", client, daemon)
			}
		}
	}
}

// startEchoForwarder starts a forwarder with one pipe listener on
// loopback in front of an echo server, and returns it with the
// listener's address.
func startEchoForwarder(tb testing.TB, opts forwarder.Options) (*forwarder.Forwarder, string) {
	tb.Helper()
	cfg := config.Default()
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = "t", "127.0.0.1:0", config.Servers(fwdtest.Echo(tb)), pipe.Name
	cfg.Listeners = []config.Listener{l}
	f, err := forwarder.New(&cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := f.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Shutdown(canceledCtx()) })
	return f, f.Addr("t").String()
}

// echoedClient sends a few bytes through addr, reads the echo to the end and
// closes, returning the client's address.
func echoedClient(tb testing.TB, addr string) string {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "hello")
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		tb.Fatalf("echo: %q, %v", b, err)
	}
	return c.LocalAddr().String()
}

// A real WebSocket client and server (github.com/coder/websocket) through http-reverse and http-forward: 16 MiB echoed intact, the pair spliced both ways after the 101, as /flows shows.

package all_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// wsEcho serves a WebSocket echo at /echo on loopback.
func wsEcho(tb testing.TB) string {
	tb.Helper()
	return fwdtest.HTTPBackend(tb, func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	})
}

func TestWebSocketSpliced(t *testing.T) {
	origin := wsEcho(t)
	cfg := fwdtest.Config(t, `
listeners:
  - name: http-reverse
    listen: '127.0.0.1:0'
    proxy: http-reverse
    pools: [{name: p, servers: ['%[1]s']}]
    routes: [{pool: p}]
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, destinations: {allow: ['%[1]s']}}
`, origin)
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			target, client := "ws://"+f.Addr(l.Name).String()+"/echo", http.DefaultClient
			if l.Proxy == "http-forward" {
				proxyURL, _ := url.Parse("http://" + f.Addr(l.Name).String())
				target = "ws://" + origin + "/echo"
				client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
			}
			c, resp, err := websocket.Dial(ctx, target, &websocket.DialOptions{HTTPClient: client})
			if err != nil {
				t.Fatalf("dial %s: %v", target, err)
			}
			defer c.CloseNow()
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("handshake: %s", resp.Status)
			}
			c.SetReadLimit(1 << 20)
			echo16MiB(ctx, t, c, f, l.Name)
			c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

// echo16MiB sends 16 MiB of messages, reads them back and compares, and
// checks /flows shows the pair spliced meanwhile.
func echo16MiB(ctx context.Context, t *testing.T, c *websocket.Conn, f *forwarder.Forwarder, listener string) {
	const total, msgSize = 16 << 20, 64 << 10
	rng := rand.NewChaCha8([32]byte{3})
	sent, got := sha256.New(), sha256.New()
	errs := make(chan error, 1)
	go func() {
		buf := make([]byte, msgSize)
		for n := 0; n < total; n += msgSize {
			rng.Read(buf)
			sent.Write(buf)
			if err := c.Write(ctx, websocket.MessageBinary, buf); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	spliced := false
	for n := 0; n < total; {
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d bytes echoed: %v", n, err)
		}
		got.Write(msg)
		n += len(msg)
		if !spliced {
			for _, fl := range f.Flows().Snapshot() {
				if fl.Listener == listener && fl.State == "spliced" {
					spliced = true
				}
			}
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatal("16 MiB echoed through the proxy differ from what was sent")
	}
	if !spliced {
		t.Errorf("/flows never showed the %s pair spliced during the echo", listener)
	}
}

// A panic in one pair's proxy closes that pair, counted as panic, and the forwarder serves the next pair.

package forwarder

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy"
)

// panicky panics on its first pair and echoes a greeting on the others.
// Its count is atomic: the pairs run on their own goroutines, and nothing
// the race detector sees orders the second after the first.
type panicky struct{ calls atomic.Int64 }

func (p *panicky) Serve(ctx context.Context, s proxy.Session) error {
	if p.calls.Add(1) == 1 {
		panic("bug in a proxy")
	}
	_, err := s.Pair().Client.Write([]byte("hello"))
	return err
}

func TestPanicClosesOnlyItsPair(t *testing.T) {
	cfg := config.Default()
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = "p", "127.0.0.1:0", config.Servers("127.0.0.1:9"), copyengine.Name
	cfg.Listeners = []config.Listener{l}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := New(&cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.listeners[0].proxy = &panicky{}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Shutdown(context.Background()) })
	for i, want := range []string{"", "hello"} {
		c, err := net.Dial("tcp", f.Addr("p").String())
		if err != nil {
			t.Fatalf("pair %d: %v (the panic took the forwarder down?)", i, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != want {
			t.Errorf("pair %d: got %q, want %q", i, got, want)
		}
	}
	// The pair's goroutine counts the close just after closing its
	// sockets, which the client may see first.
	testenv.Eventually(t, `splicer_connections_closed_total{reason="panic"} at 1`, func() bool {
		return CounterSum(f, "splicer_connections_closed_total", "reason", "panic") == 1
	})
}

// Tests that a pair's lines in the daemon's log name the pair, its client and its upstream.

package forwarder_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/testenv"
)

// TestPairClosedLineNamesThePair: without an access log, each pair's
// closing line at info names the pair's ID, its client and its
// upstream, in the text handler's own format.
func TestPairClosedLineNamesThePair(t *testing.T) {
	daemon := &testenv.Buffer{}
	opts := forwarder.Options{Log: slog.New(slog.NewTextHandler(daemon, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	f, addr := startEchoForwarder(t, opts)
	client := echoedClient(t, addr)
	f.Shutdown(context.Background()) // every pair closed and logged
	want := regexp.MustCompile(fmt.Sprintf(`msg="pair closed" listener=t pair=\d+ client=%s upstream=127\.0\.0\.1:\d+ reason=eof`, regexp.QuoteMeta(client)))
	if !want.MatchString(daemon.String()) {
		t.Errorf("no closing line matching %s in the log:\n%s", want, daemon)
	}
}

// Tests of the sockmap engine on real loopback TCP connections: conformance, bulk integrity, limits, flow control, resets and scale.
package sockmap_test

import (
	"log/slog"
	"testing"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/engine/sockmap"
	"github.com/splicer/splicer/internal/testenv"
)

// newEngine returns a sockmap engine closed at the end of the test.
func newEngine(tb testing.TB, opts sockmap.Options) *sockmap.Engine {
	tb.Helper()
	testenv.RequireRoot(tb)
	e, err := sockmap.New(opts, slog.Default())
	if err != nil {
		tb.Fatalf("sockmap.New: %v", err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, newEngine(t, sockmap.Options{}))
}

// The conformance suite every engine passes, run against ip with pairs through the lab.

package ip

import (
	"testing"

	"github.com/splicer/splicer/engine/enginetest"
)

// TestConformance runs enginetest's suite with pairs that cross the lab's
// forwarder namespace (ip cannot splice loopback pairs: it needs devices).
func TestConformance(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 64})
	// The suite's limited splice has its server write 305 KB at once,
	// to a client connection just opened: the upstream socket bounded as
	// the forwarder bounds http-reverse's, or ip refuses the splice
	// (windowsFit) and the suite has no engine to fall back to.
	el.upstreamRcvBuf = 32 << 10
	enginetest.Run(t, el.e, enginetest.WithPairs(func(tb testing.TB) *enginetest.Conns {
		tb.Helper()
		lp := el.pair(tb, "")
		return &enginetest.Conns{Pair: lp.p, Client: lp.client, Server: lp.server}
	}))
}

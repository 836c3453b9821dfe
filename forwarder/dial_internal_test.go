// Dial errors name their cause in the close reason: refused, unreachable, timed out, reset at once.

package forwarder

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/splicer/splicer/proxy"
)

func TestDialErrorsNameTheirCause(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{syscall.ECONNREFUSED, "upstream_refused"},
		{syscall.EHOSTUNREACH, "upstream_unreachable"},
		{syscall.ENETUNREACH, "upstream_unreachable"},
		{os.ErrDeadlineExceeded, "upstream_timeout"},
		{syscall.ECONNRESET, "reset"},
		{syscall.EACCES, "proxy_error"},
	} {
		err := classifyDial(context.Background(), fmt.Errorf("dial tcp 192.0.2.1:80: connect: %w", tc.err))
		if got := proxy.CloseReason(err); got != tc.want {
			t.Errorf("dial failing with %v: close reason %q, want %q", tc.err, got, tc.want)
		}
	}
}

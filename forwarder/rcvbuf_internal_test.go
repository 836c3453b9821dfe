// upstreamRcvBuf: which listeners bound their upstream connections' receive buffers, and by how much.

package forwarder

import (
	"testing"

	"github.com/splicer/splicer/internal/config"
)

func TestUpstreamRcvBuf(t *testing.T) {
	size := func(s config.Size) *config.Size { return &s }
	for _, tc := range []struct {
		name   string
		lc     config.Listener
		relays bool
		want   int
	}{
		{"http-reverse, ip may splice: the default", config.Listener{Proxy: "http-reverse"}, true, int(config.DefaultPoolReceiveBuffer)},
		{"http-reverse, no ip: the kernel's", config.Listener{Proxy: "http-reverse"}, false, 0},
		{"configured", config.Listener{Proxy: "http-reverse", UpstreamPool: &config.UpstreamPool{ReceiveBuffer: size(1 << 20)}}, true, 1 << 20},
		{"configured off", config.Listener{Proxy: "http-reverse", UpstreamPool: &config.UpstreamPool{ReceiveBuffer: size(0)}}, true, 0},
		{"tcp splices to the end", config.Listener{Proxy: "tcp"}, true, 0},
		{"http-forward dials per request", config.Listener{Proxy: "http-forward"}, true, 0},
	} {
		if got := upstreamRcvBuf(tc.lc, tc.relays); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

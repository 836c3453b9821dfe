// How the tcp proxy ends a pair whose upstreams all failed: a client whose server reset the connection at once gets a reset too.

package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy"
	"github.com/splicer/splicer/proxy/proxytest"
)

func TestFailedUpstreamEndsTheClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		reason string
		want   error // what the client's read ends with once the forwarder closes its side
	}{
		{"reset at once", errors.Join(proxy.ErrUpstreamReset, syscall.ECONNRESET), "reset", syscall.ECONNRESET},
		{"refused", errors.Join(proxy.ErrUpstreamRefused, syscall.ECONNREFUSED), "upstream_refused", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := enginetest.NewPair(t)
			client, served := c.Client, c.Pair.Client
			s := &proxytest.Session{P: c.Pair, DialFunc: func(context.Context, string) (*net.TCPConn, error) { return nil, tc.err }}
			p := &Proxy{Upstreams: proxy.NewPool(config.Pool{Name: "upstream", Servers: config.Servers("192.0.2.1:80")})}
			err := p.Serve(context.Background(), s)
			if got := proxy.CloseReason(err); got != tc.reason {
				t.Errorf("close reason %q (err %v), want %q", got, err, tc.reason)
			}
			served.Close() // what the forwarder does with a pair whose proxy returned
			client.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, err := io.ReadAll(client)
			if len(b) != 0 || !errors.Is(err, tc.want) {
				t.Errorf("the client read %d bytes, then %v; want nothing, then %v", len(b), err, tc.want)
			}
		})
	}
}

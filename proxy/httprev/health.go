// The dialer of a pool's active health checks (proxy.CheckHealth: GET the pool's health path on each server every interval; a server that fails is skipped until it passes again).

package httprev

import (
	"context"
	"net"
)

// DialFunc connects where the forwarder runs (its network namespace in tests).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

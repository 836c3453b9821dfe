// Tests that a reload's tcp_keepalive reaches the connections accepted on a listening socket the changed listener took over.

package forwarder_test

import (
	"net"
	"testing"
	"time"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// TestReloadedKeepaliveReachesNewClients: accepted connections take their
// keepalive from the listening socket, which a changed listener takes
// over from the old one at a reload: the new settings must be on it.
func TestReloadedKeepaliveReachesNewClients(t *testing.T) {
	up := fwdtest.Echo(t)
	addr := testenv.FreeAddr(t)
	l := loopListener("t", addr, up, copyengine.Name)
	l.TCPKeepalive = config.TCPKeepalive{Idle: config.Duration(7 * time.Second), Interval: config.Duration(3 * time.Second), Count: 4}
	f := fwdtest.Start(t, l)
	l.TCPKeepalive = config.TCPKeepalive{Idle: config.Duration(11 * time.Second), Interval: config.Duration(5 * time.Second), Count: 6}
	if err := reloadTo(t, f, l); err != nil {
		t.Fatal(err)
	}
	if got := f.Addr("t").String(); got != addr {
		t.Fatalf("the reloaded listener is on %s, want the socket it took over, on %s", got, addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("hello"))
	want := keepalive{true, 11, 5, 6}
	if got := keepaliveOf(t, c.RemoteAddr(), c.LocalAddr()); got != want {
		t.Errorf("the forwarder's client socket after the reload: keepalive %+v, want %+v", got, want)
	}
}

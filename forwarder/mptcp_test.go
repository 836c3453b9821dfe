// The forwarder's listeners speak plain TCP to clients that offer MPTCP, as HAProxy's and nginx's do.

package forwarder_test

import (
	"context"
	"io"
	"net"
	"testing"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// TestListenerRefusesMPTCP: a client that offers MPTCP gets a plain TCP
// connection, which every engine can take (ip cannot splice an MPTCP
// socket), and still reaches its server.
func TestListenerRefusesMPTCP(t *testing.T) {
	lc := fwdtest.TCP("t", fwdtest.Echo(t))
	lc.Engine = copyengine.Name
	f := fwdtest.Start(t, lc)
	var d net.Dialer
	d.SetMultipathTCP(true)
	c, err := d.DialContext(context.Background(), "tcp", f.Addr("t").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	mptcp, err := c.(*net.TCPConn).MultipathTCP()
	if err != nil {
		t.Fatal(err)
	}
	if mptcp {
		t.Fatal("the client's connection is MPTCP: the listener took MPTCP")
	}
}

// Freezing refuses an MPTCP socket, which the splice relies on instead of asking each socket its protocol.

package tcprepair

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

// TestFreezeRefusesMPTCP: an MPTCP connection is refused with ErrMPTCP
// and left as it was (Thaw has nothing to undo, the bytes still flow); a
// TCP client of an MPTCP listener is accepted as a TCP socket, frozen as
// any other.
func TestFreezeRefusesMPTCP(t *testing.T) {
	testenv.RequireRoot(t)
	var lc net.ListenConfig
	lc.SetMultipathTCP(true)
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no MPTCP listener: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	for _, c := range []struct {
		name  string
		mptcp bool
	}{{"MPTCP client", true}, {"TCP client", false}} {
		t.Run(c.name, func(t *testing.T) {
			var d net.Dialer
			d.SetMultipathTCP(c.mptcp)
			client, err := d.Dial("tcp4", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			a, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			mp, err := a.(*net.TCPConn).MultipathTCP()
			if err != nil || mp != c.mptcp {
				t.Skipf("accepted socket uses MPTCP: %v, %v; want %v", mp, err, c.mptcp)
			}
			_, err = Freeze(a.(*net.TCPConn))
			if c.mptcp != errors.Is(err, ErrMPTCP) {
				t.Fatalf("Freeze: %v; want ErrMPTCP: %v", err, c.mptcp)
			}
			if err := Thaw(a.(*net.TCPConn)); err != nil {
				t.Fatalf("Thaw: %v", err)
			}
			if _, err := client.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(a, make([]byte, 1)); err != nil {
				t.Fatalf("read after Thaw: %v", err)
			}
		})
	}
}

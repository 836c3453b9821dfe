// Leaving repair mode keeps a socket's SO_REUSEADDR, so its TIME_WAIT does not stop a listener from binding its port again.

package tcprepair

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/internal/testenv"
)

// TestRepairOffKeepsReuse: a connection accepted from a listener is
// frozen and thawed (as the engine does to every pair it takes), then
// closed by this side first, which leaves it in TIME_WAIT on the
// listener's port. The kernel clears SO_REUSEADDR when a socket leaves
// repair mode; without it set again, the TIME_WAIT entry keeps a new
// listener (a restarted forwarder) off the port for a minute.
func TestRepairOffKeepsReuse(t *testing.T) {
	testenv.RequireRoot(t)
	c := enginetest.NewPair(t)
	server := c.Pair.Client // accepted: on its (closed) listener's port
	addr := server.LocalAddr().String()
	if _, err := Freeze(server); err != nil {
		t.Fatal(err)
	}
	if err := Thaw(server); err != nil {
		t.Fatal(err)
	}
	closeFirst(t, server, c.Client)
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again after a thawed connection's TIME_WAIT: %v", addr, err)
	}
	again.Close()
}

// closeFirst closes first, waits for second to read the FIN and closes
// it too, which leaves first's side in TIME_WAIT.
func closeFirst(t *testing.T, first, second net.Conn) {
	t.Helper()
	first.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := second.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the peer of the closed side read %v, want EOF", err)
	}
	second.Close()
	time.Sleep(50 * time.Millisecond) // the last ACK reaches first's side
}

// paced asks each connection's congestion control once: a body to another upstream is asked anew, never answered from the last one's.

package httpcore

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy"
)

// pairSession is a proxy.Session with a pair and nothing else: enough for
// what reads the pair's connections.
type pairSession struct {
	proxy.Session
	pair *engine.Pair
}

func (s pairSession) Pair() *engine.Pair { return s.pair }

// setCC sets conn's congestion control.
func setCC(tb testing.TB, conn *net.TCPConn, cc string) {
	tb.Helper()
	var refused error // the kernel's answer, not a closed socket's
	if err := sockopt.WithFD(conn, func(fd int) error {
		refused = unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	if refused != nil {
		testenv.SkipOrFail(tb, "congestion control "+cc+": "+refused.Error())
	}
}

func TestPacedAsksEachUpstream(t *testing.T) {
	client, _ := testenv.TCPPair(t)
	cubic, _ := testenv.TCPPair(t)
	bbr, _ := testenv.TCPPair(t)
	setCC(t, client, "bbr")
	setCC(t, cubic, "cubic")
	setCC(t, bbr, "bbr")
	pair := engine.NewPair(1, "paced", client)
	c := &Conn{S: pairSession{pair: pair}}
	for i, step := range []struct {
		up   *net.TCPConn
		want bool
	}{{cubic, false}, {bbr, true}, {bbr, true}, {cubic, false}} {
		pair.SetUpstream(step.up)
		if got := c.paced(engine.Up); got != step.want {
			t.Fatalf("body %d upstream: paced %v, want %v", i+1, got, step.want)
		}
	}
	if !c.paced(engine.Down) {
		t.Fatal("a client under bbr not paced")
	}
	// Asked once: the client's answer stays, whatever its socket says now.
	setCC(t, client, "cubic")
	if !c.paced(engine.Down) {
		t.Fatal("the client asked again")
	}
}

// Forwarder tests on loopback: a tcp listener forwarding to a local origin through each engine.

package forwarder_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/pipe"
	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
)

// startThrough runs a forwarder with one tcp listener, "t", on loopback
// to upstream, through engineName.
func startThrough(tb testing.TB, engineName, upstream string) *forwarder.Forwarder {
	tb.Helper()
	l := fwdtest.TCP("t", upstream)
	l.Engine = engineName
	return fwdtest.Start(tb, l)
}

// throughEveryEngine runs test as a subtest for each engine this host
// allows, with a connection c through a tcp listener "t" in front of up
// that the engine splices.
func throughEveryEngine(t *testing.T, up string, test func(t *testing.T, f *forwarder.Forwarder, c net.Conn)) {
	for _, name := range []string{copyengine.Name, pipe.Name, "auto"} {
		t.Run(name, func(t *testing.T) {
			f := startThrough(t, name, up)
			test(t, f, fwdtest.DialFor(t, f.Addr("t").String(), 30*time.Second))
		})
	}
}

func TestEchoThroughEveryEngine(t *testing.T) {
	throughEveryEngine(t, fwdtest.Echo(t), func(t *testing.T, f *forwarder.Forwarder, c net.Conn) {
		msg := bytes.Repeat([]byte("splicer"), 100000)
		go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo: %d bytes, err %v", len(got), err)
		}
	})
}

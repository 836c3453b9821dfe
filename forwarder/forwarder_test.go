// Forwarder tests on loopback: a tcp listener forwarding to a local origin through each engine.

package forwarder_test

import (
	"bytes"
	"io"
	"net"
	"testing"

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

func TestEchoThroughEveryEngine(t *testing.T) {
	up := fwdtest.Echo(t)
	for _, name := range []string{copyengine.Name, pipe.Name, "auto"} {
		t.Run(name, func(t *testing.T) {
			f := startThrough(t, name, up)
			c, err := net.Dial("tcp", f.Addr("t").String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg := bytes.Repeat([]byte("splicer"), 100000)
			go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo through %s: %d bytes, err %v", name, len(got), err)
			}
		})
	}
}

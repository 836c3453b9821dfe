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
	"github.com/splicer/splicer/internal/config"
)

// startForwarder runs a forwarder with one tcp listener on loopback to upstream.
func startForwarder(tb testing.TB, engineName, upstream string) *forwarder.Forwarder {
	tb.Helper()
	l := config.DefaultListener()
	l.Name, l.Listen, l.Upstream, l.Engine = "t", "127.0.0.1:0", config.Servers(upstream), engineName
	return fwdtest.Start(tb, l)
}

func TestEchoThroughEveryEngine(t *testing.T) {
	up := fwdtest.Echo(t)
	for _, name := range []string{copyengine.Name, pipe.Name, "auto"} {
		t.Run(name, func(t *testing.T) {
			f := startForwarder(t, name, up)
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

// Tests a tcp listener with proxy_protocol through a real forwarder on loopback: the upstream reads exactly the header, then the client's bytes.

package proxyproto_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/proxyproto"
)

func TestTCPListenerSendsHeader(t *testing.T) {
	for _, v := range []string{"v1", "v2"} {
		t.Run(v, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			f := startTCPForwarder(t, ln.Addr().String(), v)

			c, err := net.Dial("tcp", f.Addr("pp").String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("client bytes"))
			c.(*net.TCPConn).CloseWrite()

			up, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			up.SetDeadline(time.Now().Add(10 * time.Second))
			all, err := io.ReadAll(up)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := proxyproto.Header(v, c.LocalAddr(), c.RemoteAddr())
			if string(all) != string(want)+"client bytes" {
				t.Fatalf("upstream read %q, want the header %q then the client's bytes", all, want)
			}
			info, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(all)))
			if err != nil || info.Source.String() != c.LocalAddr().String() || info.Destination.String() != c.RemoteAddr().String() {
				t.Errorf("header says %+v, %v; the client is %s and dialled %s", info, err, c.LocalAddr(), c.RemoteAddr())
			}
		})
	}
}

func startTCPForwarder(tb testing.TB, upstream, version string) *forwarder.Forwarder {
	tb.Helper()
	lc := config.DefaultListener()
	lc.Name, lc.Listen, lc.Upstream, lc.ProxyProtocol = "pp", "127.0.0.1:0", config.Servers(upstream), version
	return fwdtest.Start(tb, lc)
}

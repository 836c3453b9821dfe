// Tests of SourceDialer in a lab: connections from a chosen address take the client's TIME_WAIT ports again, as plain connects do.

package loadgen

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// TestSourceDialerTakesTimeWaitPortsAgain closes each connection from
// the client first, so each port it used sits in TIME_WAIT, with eight
// ephemeral ports and net.ipv4.tcp_tw_reuse 1: three times as many
// connections as ports must all open, from the address asked for. A
// dialer that bound the port before connect could not take a TIME_WAIT
// port for 60 s.
func TestSourceDialerTakesTimeWaitPortsAgain(t *testing.T) {
	testenv.RequireRoot(t)
	l := lab.NewT(t, lab.DefaultConfig())
	for k, v := range map[string]string{"net.ipv4.ip_local_port_range": "40000 40007", "net.ipv4.tcp_tw_reuse": "1"} {
		if err := l.Client.Sysctl(k, v); err != nil {
			t.Fatal(err)
		}
	}
	extra, err := l.AddClientAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	src := extra[0]
	ln, err := l.Fwd.Listen("tcp", net.JoinHostPort(l.Cfg.FwdClient.Addr().String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go drainEach(ln)
	const conns = 24
	deadline := time.Now().Add(20 * time.Second)
	for i := range conns {
		c, err := dialWhilePortsBusy(t, l, src, ln.Addr().String(), deadline)
		if err != nil {
			t.Fatalf("connection %d of %d with 8 ports: %v", i+1, conns, err)
		}
		if got := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); got != src {
			t.Errorf("connection %d from %v, want %v", i+1, got, src)
		}
		c.Write([]byte{1})
		c.Close()
	}
}

// dialWhilePortsBusy dials addr from src in the client namespace until
// it connects or deadline passes, waiting while no port is free.
func dialWhilePortsBusy(tb testing.TB, l *lab.Lab, src netip.Addr, addr string, deadline time.Time) (net.Conn, error) {
	tb.Helper()
	for {
		var c net.Conn
		err := l.Client.Do(func() (err error) {
			c, err = SourceDialer(src).DialContext(context.Background(), "tcp", addr)
			return err
		})
		busy := errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EADDRINUSE)
		if !busy || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drainEach reads every connection of ln to its end and closes it.
func drainEach(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			io.Copy(io.Discard, c)
			c.Close()
		}()
	}
}

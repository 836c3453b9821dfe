// Lab tests with curl: the listeners of examples/socks5.yaml carry real downloads over IPv4, IPv6 and names, spliced; bad credentials and garbage are refused without disturbing other pairs.

package socks5_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
	"github.com/splicer/splicer/proxy/socks5"
)

const example = "../../examples/socks5.yaml"

// TestExampleParses keeps the example loadable where the lab cannot run.
func TestExampleParses(t *testing.T) {
	cfg, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners) != 2 || cfg.Listeners[0].SOCKS5 == nil || len(cfg.Listeners[0].SOCKS5.Users) != 1 || cfg.Listeners[1].SOCKS5 == nil || cfg.Listeners[1].SOCKS5.Auth != "none" {
		t.Errorf("listeners = %+v, want socks with one user and socks-open with auth none", cfg.Listeners)
	}
}

// splicedEngines are the engines that take a pair out of the proxy's
// hands: with engine auto, copy carries a tunnel until it proves long
// (the listener's promote thresholds), and ip past them.
var splicedEngines = []string{"ip", "sockmap", "pipe", "copy"}

func TestLabCurl(t *testing.T) {
	l := httplab.New(t)
	srv := httplab.ServeOrigin(t, l, ":80") // both 10.99.2.2 and fd99:2::2
	// A name the forwarder resolves: localhost, served in the forwarder's own namespace.
	local, err := l.Fwd.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	origintest.Serve(t, local, origin.HTTP)
	withAuth := httplab.ExampleListener(t, example, "socks")
	// Loopback is refused by default, and a name rule would not open it:
	// this listener's address rules name the one loopback service its
	// users may reach (by name or address), and the origin (an address
	// allow list leaves nothing else reachable).
	withAuth.Destinations = &config.Destinations{Allow: []string{"127.0.0.1:8080", "10.99.2.2:80"}}
	f := httplab.Start(t, l, withAuth, httplab.ExampleListener(t, example, "socks-open"))
	auth := f.Addr("socks").String()
	open := f.Addr("socks-open").String()

	download := func(t *testing.T, size int64, args ...string) {
		t.Helper()
		out, err := httplab.Curl(t, l, args...)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(out)) != size || sha256.Sum256(out) != origin.ObjectSHA256(size) {
			t.Fatalf("downloaded %d bytes (want %d) with sha256 %x", len(out), size, sha256.Sum256(out))
		}
	}
	spliced := func() float64 {
		var n float64
		for _, e := range splicedEngines {
			n += f.Metric("splicer_splice_transitions_total", "engine", e, "outcome", "eof")
		}
		return n
	}

	t.Run("user and password", func(t *testing.T) {
		before := spliced()
		for _, size := range []int64{1000, 16 << 20} {
			download(t, size, "--socks5", "alice:wonderland@"+auth, "http://10.99.2.2"+origin.ObjectPath(size))
		}
		if got := spliced() - before; got != 2 {
			t.Errorf("%v tunnels ended spliced (by one of %v), want 2", got, splicedEngines)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		before := srv.Stats()[origin.HTTP].Accepted
		for _, cred := range []string{"alice:alice", "mallory:wonderland"} {
			out, err := httplab.Curl(t, l, "--socks5", cred+"@"+auth, "http://10.99.2.2/obj/1000")
			if err == nil {
				t.Errorf("curl with %s: succeeded with %d bytes", cred, len(out))
			} else if !strings.Contains(err.Error(), "SOCKS") {
				t.Errorf("curl with %s failed, but not in the SOCKS handshake: %v", cred, err)
			}
		}
		if n := srv.Stats()[origin.HTTP].Accepted - before; n != 0 {
			t.Errorf("the origin accepted %d connections from rejected clients", n)
		}
	})
	t.Run("no credentials for a listener that needs them", func(t *testing.T) {
		if _, err := httplab.Curl(t, l, "--socks5", auth, "http://10.99.2.2/obj/1000"); err == nil {
			t.Error("curl without credentials succeeded")
		}
	})
	t.Run("no authentication, IPv6", func(t *testing.T) {
		download(t, 1<<20, "--socks5", open, "http://[fd99:2::2]"+origin.ObjectPath(1<<20))
	})
	t.Run("domain name", func(t *testing.T) {
		download(t, 100000, "--socks5-hostname", "alice:wonderland@"+auth, "http://localhost:8080"+origin.ObjectPath(100000))
	})
	t.Run("loopback refused by default", func(t *testing.T) {
		_, err := httplab.Curl(t, l, "--socks5-hostname", open, "http://localhost:8080"+origin.ObjectPath(1000))
		if err == nil || !strings.Contains(err.Error(), "(2)") {
			t.Errorf("curl to localhost through socks-open: %v, want SOCKS reply 2 (not allowed)", err)
		}
	})
	t.Run("garbage beside a spliced tunnel", func(t *testing.T) {
		tunnel := httplab.Dial(t, l, open)
		greet(t, tunnel, 0x00)
		if rep, _ := connectTo(t, tunnel, "10.99.2.2:80"); rep != socks5.RepSucceeded {
			t.Fatalf("reply %#x", rep)
		}
		// While auto hands a pair from copy to ip, /flows may show it
		// spliced by none for a moment: wait for an engine's name.
		flow := waitFlow(t, f, "socks-open", func(fl forwarder.Flow) bool {
			return fl.State == "spliced" && slices.Contains(splicedEngines, fl.Engine)
		})
		t.Logf("/flows: tunnel spliced by %s %s", flow.Engine, flow.Note)
		for i := range 10 {
			c := httplab.Dial(t, l, open)
			c.SetDeadline(time.Now().Add(httplab.WaitFor))
			c.Write([]byte(strings.Repeat(fmt.Sprintf("\x05\x7f%c garbage ", i), 50)))
			io.ReadAll(c)
		}
		tunnel.SetDeadline(time.Now().Add(httplab.WaitFor))
		fmt.Fprintf(tunnel, "GET %s HTTP/1.0\r\nHost: 10.99.2.2\r\n\r\n", origin.ObjectPath(5000))
		resp, err := io.ReadAll(tunnel)
		if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.") || !strings.Contains(string(resp), "200") {
			t.Fatalf("the tunnel after the garbage: %q..., %v", resp[:min(len(resp), 40)], err)
		}
	})
	t.Run("unreachable destinations", func(t *testing.T) {
		for _, c := range []struct {
			addr string
			want byte
		}{
			{"192.0.2.1:80", socks5.RepNetworkUnreachable}, // no route in the forwarder namespace
			{"10.99.2.2:81", socks5.RepConnectionRefused},
			{"10.99.2.99:80", socks5.RepHostUnreachable}, // on the server link, but nobody answers ARP
		} {
			conn := httplab.Dial(t, l, open)
			conn.SetDeadline(time.Now().Add(httplab.WaitFor))
			greet(t, conn, 0x00)
			if rep, _ := connectTo(t, conn, c.addr); rep != c.want {
				t.Errorf("CONNECT %s: reply %#x, want %#x", c.addr, rep, c.want)
			}
		}
	})
}

// waitFlow waits until listener has one open flow that ok accepts.
func waitFlow(tb testing.TB, f *httplab.Forwarder, listener string, ok func(forwarder.Flow) bool) forwarder.Flow {
	tb.Helper()
	var last []forwarder.Flow
	deadline := time.Now().Add(httplab.WaitFor)
	for {
		last = last[:0]
		for _, fl := range f.Flows().Snapshot() {
			if fl.Listener == listener {
				last = append(last, fl)
			}
		}
		if len(last) == 1 && ok(last[0]) {
			return last[0]
		}
		if time.Now().After(deadline) {
			tb.Fatalf("/flows of %s: %+v", listener, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

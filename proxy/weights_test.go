// Tests that pools and upstream lists share requests and connections among their servers by weight and balance.

package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// TestPoolServersShareRequestsByWeight: 40 requests on one keep-alive
// connection through a pool of three servers, weights 3, 1 and 0 (one
// being drained), reach them 30, 10 and 0 times, as round robin by weight
// gives exactly.
func TestPoolServersShareRequestsByWeight(t *testing.T) {
	var served [3]atomic.Int64
	var addrs [3]string
	for i := range addrs {
		addrs[i] = fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) {
			served[i].Add(1)
			fmt.Fprint(w, i)
		})
	}
	cfg := fwdtest.Config(t, "listeners:\n"+revListener("rev", "servers: [{address: '%s', weight: 3}, '%s', {address: '%s', weight: 0}]", ""),
		addrs[0], addrs[1], addrs[2])
	f := fwdtest.Start(t, cfg.Listeners...)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)
	for i := range 40 {
		resp, err := client.Get("http://" + f.Addr("rev").String() + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if a, b, c := served[0].Load(), served[1].Load(), served[2].Load(); a != 30 || b != 10 || c != 0 {
		t.Errorf("the servers of weight 3, 1 and 0 served %d, %d and %d of 40 requests, want 30, 10 and 0", a, b, c)
	}
}

// TestUpstreamListsShareConnectionsByWeight: 40 connections (one request
// each) through a tcp and a filter listener whose upstream lists weigh
// three servers 3, 1 and 0 reach them 30, 10 and 0 times.
func TestUpstreamListsShareConnectionsByWeight(t *testing.T) {
	for _, kind := range []string{"tcp", "filter"} {
		t.Run(kind, func(t *testing.T) {
			var served [3]atomic.Int64
			var addrs [3]string
			for i := range addrs {
				addrs[i] = fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) { served[i].Add(1) })
			}
			f := fwdtest.Start(t, upstreamList(t, kind, "", fmt.Sprintf("[{address: '%s', weight: 3}, '%s', {address: '%s', weight: 0}]", addrs[0], addrs[1], addrs[2])))
			for i := range 40 {
				if code := getStatus(t, f.Addr("l").String()); code != http.StatusOK {
					t.Fatalf("request %d: status %d", i+1, code)
				}
			}
			if a, b, c := served[0].Load(), served[1].Load(), served[2].Load(); a != 30 || b != 10 || c != 0 {
				t.Errorf("the servers of weight 3, 1 and 0 served %d, %d and %d of 40 connections, want 30, 10 and 0", a, b, c)
			}
		})
	}
}

// upstreamList is a listener "l" of kind (tcp or filter) in front of the
// upstream list servers (YAML) under balance ("": the default).
func upstreamList(tb testing.TB, kind, balance, servers string) config.Listener {
	tb.Helper()
	if balance != "" {
		balance = "\n    balance: " + balance
	}
	cfg := fwdtest.Config(tb, `
listeners:
  - name: l
    listen: '127.0.0.1:0'
    proxy: %s
    upstream: %s%s
`, kind, servers, balance)
	return cfg.Listeners[0]
}

// namedServers are n servers that each write their name (a, b, ...) to
// every connection and hold it until the client closes it.
func namedServers(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		name := string(rune('a' + i))
		testenv.ServeEach(tb, ln, time.Minute, func(c net.Conn) {
			io.WriteString(c, name)
			io.Copy(io.Discard, c)
		})
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// serverOf opens a connection through addr and returns it and the name
// of the server that answered.
func serverOf(tb testing.TB, addr string) (net.Conn, string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		tb.Fatalf("no server name through %s: %v", addr, err)
	}
	return c, string(b)
}

// TestUpstreamListBalances: a tcp listener's balance key picks servers as
// HAProxy's roundrobin, leastconn and source do. Two servers a and b; a
// client holds a connection to a, opens a second (b) and closes it, then
// opens a third: round_robin gives a (its turn), least_conn b (a holds one,
// b none). consistent_hash sends every connection of one client address to
// one server.
func TestUpstreamListBalances(t *testing.T) {
	for _, tc := range []struct{ balance, third string }{{"round_robin", "a"}, {"least_conn", "b"}} {
		t.Run(tc.balance, func(t *testing.T) {
			addrs := namedServers(t, 2)
			f := fwdtest.Start(t, upstreamList(t, "tcp", tc.balance, fmt.Sprintf("['%s', '%s']", addrs[0], addrs[1])))
			addr := f.Addr("l").String()
			if _, got := serverOf(t, addr); got != "a" {
				t.Fatalf("first connection went to %s, want a", got)
			}
			second, got := serverOf(t, addr)
			if got != "b" {
				t.Fatalf("second connection went to %s, want b", got)
			}
			second.Close()
			testenv.Eventually(t, "the second pair to end", func() bool { return f.Flows().Len() == 1 })
			if _, got := serverOf(t, addr); got != tc.third {
				t.Errorf("third connection went to %s, want %s", got, tc.third)
			}
		})
	}
	t.Run("consistent_hash", func(t *testing.T) {
		addrs := namedServers(t, 3)
		f := fwdtest.Start(t, upstreamList(t, "tcp", "consistent_hash", fmt.Sprintf("['%s', '%s', '%s']", addrs[0], addrs[1], addrs[2])))
		var first string
		for i := range 9 {
			c, got := serverOf(t, f.Addr("l").String())
			c.Close()
			if i == 0 {
				first = got
			} else if got != first {
				t.Fatalf("connection %d from 127.0.0.1 went to %s, the first to %s", i+1, got, first)
			}
		}
	})
}

// TestBackupServerStandsIn: a tcp listener whose list has a primary server
// and a backup sends every connection to the primary; with the primary
// drained, to the backup; with it ready again, to the primary.
func TestBackupServerStandsIn(t *testing.T) {
	addrs := namedServers(t, 2)
	f := fwdtest.Start(t, upstreamList(t, "tcp", "", fmt.Sprintf("['%s', {address: '%s', backup: true}]", addrs[0], addrs[1])))
	expect := func(want string) {
		t.Helper()
		for i := range 4 {
			c, got := serverOf(t, f.Addr("l").String())
			c.Close()
			if got != want {
				t.Fatalf("connection %d went to %s, want %s", i+1, got, want)
			}
		}
	}
	expect("a")
	f.DrainUpstream("l", "", addrs[0], true)
	expect("b")
	f.DrainUpstream("l", "", addrs[0], false)
	expect("a")
}

// TestMaxConnsBoundsAServer: a tcp listener's two servers take one
// connection each (max_conns: 1): two clients held open reach a and b,
// a third is closed without reaching either (upstream_unreachable); once
// one client leaves, the next reaches its server. Through http-reverse, a
// request that finds its one server carrying max_conns requests gets 503.
func TestMaxConnsBoundsAServer(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		addrs := namedServers(t, 2)
		f := fwdtest.Start(t, upstreamList(t, "tcp", "", fmt.Sprintf("[{address: '%s', max_conns: 1}, {address: '%s', max_conns: 1}]", addrs[0], addrs[1])))
		addr := f.Addr("l").String()
		first, a := serverOf(t, addr)
		_, b := serverOf(t, addr)
		if a+b != "ab" {
			t.Fatalf("two clients reached %s and %s, want a and b", a, b)
		}
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("a third client with both servers full read %d bytes, %v; want the connection closed", n, err)
		}
		testenv.Eventually(t, "the refused pair counted", func() bool {
			return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", "l", "reason", "upstream_unreachable") == 1
		})
		first.Close()
		testenv.Eventually(t, "the first pair to end", func() bool { return f.Flows().Len() == 1 })
		if _, got := serverOf(t, addr); got != "a" {
			t.Errorf("after a's client left, the next went to %s, want a", got)
		}
	})
	t.Run("http-reverse", func(t *testing.T) {
		f, _ := slowRequestHolds(t, "")
		if code := getStatus(t, f.Addr("rev").String()); code != http.StatusServiceUnavailable {
			t.Errorf("a request with the one server full: %d, want 503", code)
		}
	})
	// A kept upstream connection takes the server's place for each
	// request it carries and gives it back once the response is read:
	// a keep-alive client's requests never find the server full of its
	// own, and another client gets the place afterwards.
	t.Run("http-reverse keep-alive", func(t *testing.T) {
		up := fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) {})
		cfg := fwdtest.Config(t, "listeners:\n"+revListener("rev", "servers: [{address: '%s', max_conns: 1}]", ""), up)
		f := fwdtest.Start(t, cfg.Listeners...)
		addr := f.Addr("rev").String()
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		br := bufio.NewReader(c)
		for i := range 3 {
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			answeredOK(t, br, fmt.Sprintf("request %d on one keep-alive connection", i+1))
		}
		if code := getStatus(t, addr); code != http.StatusOK {
			t.Errorf("another client after the keep-alive one's answers: %d, want 200", code)
		}
	})
}

// slowRequestHolds starts an http-reverse listener "rev" whose pool "p"
// (with poolKeys, "key: value, " each) has one server of max_conns 1, and
// has a request the server answers only once done is called hold it.
// done runs at the latest before the forwarder's shutdown waits for it.
func slowRequestHolds(tb testing.TB, poolKeys string) (f *forwarder.Forwarder, done func()) {
	tb.Helper()
	release := make(chan struct{})
	up := fwdtest.HTTPBackend(tb, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	})
	cfg := fwdtest.Config(tb, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, %sservers: [{address: '%s', max_conns: 1}]}]}
`, poolKeys, up)
	f = fwdtest.Start(tb, cfg.Listeners...)
	var once sync.Once
	done = func() { once.Do(func() { close(release) }) }
	tb.Cleanup(done)
	slow := fwdtest.DialFor(tb, f.Addr("rev").String(), 10*time.Second)
	fmt.Fprint(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	testenv.Eventually(tb, "the slow request to hold the server", func() bool {
		for _, u := range f.Upstreams() {
			if u.Active == 1 {
				return true
			}
		}
		return false
	})
	return f, done
}

// queuedList starts a tcp listener "l" whose upstream list is one server,
// "a", of max_conns 1, with a queue of timeout; it returns the forwarder
// and the listener's address.
func queuedList(tb testing.TB, timeout time.Duration) (*forwarder.Forwarder, string) {
	tb.Helper()
	addrs := namedServers(tb, 1)
	l := upstreamList(tb, "tcp", "", fmt.Sprintf("[{address: '%s', max_conns: 1}]", addrs[0]))
	l.QueueTimeout = config.Duration(timeout)
	f := fwdtest.Start(tb, l)
	return f, f.Addr("l").String()
}

// TestQueueWaitsForAPlace: with queue_timeout, a client that finds every
// server full (max_conns) waits, counted in splicer_upstream_queued, and
// is served once a place frees; one that waits past queue_timeout is
// refused as without a queue. Through http-reverse, the request waits
// for the slow one to end and gets its answer, not 503.
func TestQueueWaitsForAPlace(t *testing.T) {
	queued := func(f *forwarder.Forwarder, listener, pool string) float64 {
		return fwdtest.Metric(f, "splicer_upstream_queued", "listener", listener, "pool", pool)
	}
	t.Run("tcp", func(t *testing.T) {
		f, addr := queuedList(t, 20*time.Second)
		first, _ := serverOf(t, addr)
		second := fwdtest.DialFor(t, addr, 30*time.Second)
		testenv.Eventually(t, "the second client queued", func() bool { return queued(f, "l", "upstream") == 1 })
		first.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(second, b); err != nil || b[0] != 'a' {
			t.Fatalf("the queued client, once the first left: %q, %v; want served by a", b, err)
		}
		if q := queued(f, "l", "upstream"); q != 0 {
			t.Errorf("splicer_upstream_queued %v once served, want 0", q)
		}
	})
	t.Run("tcp past queue_timeout", func(t *testing.T) {
		f, addr := queuedList(t, 200*time.Millisecond)
		serverOf(t, addr)
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		start := time.Now()
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("a client queued past queue_timeout read %d bytes, %v; want the connection closed", n, err)
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("refused after %v, before queue_timeout 200ms", d)
		}
		testenv.Eventually(t, "the refused pair counted", func() bool {
			return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", "l", "reason", "upstream_unreachable") == 1
		})
	})
	t.Run("http-reverse", func(t *testing.T) {
		f, done := slowRequestHolds(t, "queue_timeout: 20s, ")
		status := make(chan int, 1)
		go func() { status <- getStatus(t, f.Addr("rev").String()) }()
		testenv.Eventually(t, "the second request queued", func() bool { return queued(f, "rev", "p") == 1 })
		done()
		if code := <-status; code != http.StatusOK {
			t.Errorf("a request queued for the one full server: %d, want 200 once the slow one ended", code)
		}
	})
}

// TestMaxQueueRefusesPastIt: through http-reverse with max_queue 1 and
// the one server full, the first request waits in the queue and the next
// one is answered 503 at once, long before queue_timeout; the first gets
// its answer once the server frees.
func TestMaxQueueRefusesPastIt(t *testing.T) {
	f, done := slowRequestHolds(t, "queue_timeout: 1m, max_queue: 1, ")
	addr := f.Addr("rev").String()
	first := make(chan int, 1)
	go func() { first <- getStatus(t, addr) }()
	testenv.Eventually(t, "the first request queued", func() bool {
		return fwdtest.Metric(f, "splicer_upstream_queued", "listener", "rev", "pool", "p") == 1
	})
	start := time.Now()
	if code := getStatus(t, addr); code != http.StatusServiceUnavailable {
		t.Errorf("a request past max_queue 1: %d, want 503", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the request past max_queue was answered after %v, want at once", d)
	}
	done()
	if code := <-first; code != http.StatusOK {
		t.Errorf("the queued request: %d, want 200 once the server freed", code)
	}
}

// TestQueueLetsAClientThatLeavesGo: a queued client that resets its
// connection (tcp), or closes it (http-reverse: the request is given up),
// leaves the queue at once, long before queue_timeout, counted as
// client_left, and nothing is dialled for it. A tcp client that only
// half-closes stays queued, and is served once a place frees: over a
// direct connection, the server's answer would still reach it.
func TestQueueLetsAClientThatLeavesGo(t *testing.T) {
	queued := func(f *forwarder.Forwarder, listener, pool string) float64 {
		return fwdtest.Metric(f, "splicer_upstream_queued", "listener", listener, "pool", pool)
	}
	left := func(f *forwarder.Forwarder, listener string) float64 {
		return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", listener, "reason", "client_left")
	}
	t.Run("tcp reset", func(t *testing.T) {
		f, addr := queuedList(t, time.Minute)
		first, _ := serverOf(t, addr)
		leaver := fwdtest.DialFor(t, addr, 30*time.Second)
		testenv.Eventually(t, "the second client queued", func() bool { return queued(f, "l", "upstream") == 1 })
		leaver.(*net.TCPConn).SetLinger(0)
		leaver.Close()
		testenv.Eventually(t, "the client that reset counted as client_left", func() bool { return left(f, "l") == 1 })
		if q := queued(f, "l", "upstream"); q != 0 {
			t.Errorf("splicer_upstream_queued %v once the client left, want 0", q)
		}
		first.Close()
		if _, got := serverOf(t, addr); got != "a" {
			t.Errorf("the next client went to %q, want a", got)
		}
		if n := connects(t, f, "l"); n != 2 {
			t.Errorf("%d upstream connects, want 2: the first and the last client's, none for the one that left", n)
		}
	})
	t.Run("tcp half-close", func(t *testing.T) {
		f, addr := queuedList(t, time.Minute)
		first, _ := serverOf(t, addr)
		second := fwdtest.DialFor(t, addr, 30*time.Second)
		testenv.Eventually(t, "the second client queued", func() bool { return queued(f, "l", "upstream") == 1 })
		second.(*net.TCPConn).CloseWrite()
		time.Sleep(400 * time.Millisecond) // four looks at its socket (proxy.leftEvery, doubling)
		if q, n := queued(f, "l", "upstream"), left(f, "l"); q != 1 || n != 0 {
			t.Fatalf("a half-closed client: queued %v, client_left %v; want still queued", q, n)
		}
		first.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(second, b); err != nil || b[0] != 'a' {
			t.Fatalf("the half-closed client, once a place freed: %q, %v; want served by a", b, err)
		}
	})
	t.Run("http-reverse close", func(t *testing.T) {
		f, _ := slowRequestHolds(t, "queue_timeout: 1m, ")
		c := fwdtest.DialFor(t, f.Addr("rev").String(), 30*time.Second)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		testenv.Eventually(t, "the request queued", func() bool { return queued(f, "rev", "p") == 1 })
		c.Close()
		testenv.Eventually(t, "the client that closed counted as client_left", func() bool { return left(f, "rev") == 1 })
		if q := queued(f, "rev", "p"); q != 0 {
			t.Errorf("splicer_upstream_queued %v once the client left, want 0", q)
		}
	})
}

// TestHashOnURIAndHeader: an http-reverse pool balanced by
// consistent_hash with hash_on uri sends each URI to one server, and the
// 12 URIs to more than one; with hash_on header:X-User, each user's
// requests to one server and 12 users to more than one; with the default
// (the client's address), every request from this one client to one
// server.
func TestHashOnURIAndHeader(t *testing.T) {
	var addrs [3]string
	for i := range addrs {
		addrs[i] = fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, i) })
	}
	for _, tc := range []struct {
		hashOn string
		key    func(i int) (path, user string)
		spread bool // the 12 keys reach more than one server
	}{
		{"uri", func(i int) (string, string) { return fmt.Sprintf("/obj/%d?v=1", i), "" }, true},
		{"header:X-User", func(i int) (string, string) { return "/", fmt.Sprintf("user%d", i) }, true},
		{"client_ip", func(i int) (string, string) { return fmt.Sprintf("/obj/%d", i), fmt.Sprintf("user%d", i) }, false},
	} {
		t.Run(tc.hashOn, func(t *testing.T) {
			cfg := fwdtest.Config(t, "listeners:\n"+revListener("rev", "balance: consistent_hash, hash_on: '%s', servers: ['%s', '%s', '%s']", ""),
				tc.hashOn, addrs[0], addrs[1], addrs[2])
			f := fwdtest.Start(t, cfg.Listeners...)
			client := &http.Client{}
			t.Cleanup(client.CloseIdleConnections)
			servers := map[string]bool{}
			for i := range 12 {
				path, user := tc.key(i)
				var first string
				for j := range 3 {
					req, _ := http.NewRequest(http.MethodGet, "http://"+f.Addr("rev").String()+path, nil)
					if user != "" {
						req.Header.Set("X-User", user)
					}
					resp, err := client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if j == 0 {
						first = string(b)
					} else if string(b) != first {
						t.Fatalf("key %d went to server %s, then %s", i, first, b)
					}
				}
				servers[first] = true
			}
			if spread := len(servers) > 1; spread != tc.spread {
				t.Errorf("12 keys reached servers %v; want spread over several %v", servers, tc.spread)
			}
		})
	}
}

// Lab tests of http-forward with curl: GET bodies spliced, keep-alive, CONNECT (TLS and the seed 002 handshake sequence), the cache, chunked bodies and bad input.

package httpfwd_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// Ports of the lab: the proxy listener, and the servers behind it.
const (
	proxyPort  = 3128 // as in examples/http-forward.yaml
	strictPort = 3129 // a listener with a short header timeout and few headers allowed
	originPort = 80
	tlsPort    = 443
	rawPort    = 8443 // the seed 002 handshake sequence server
	cachePort  = 8080
	chunkPort  = 8081
)

// fwdLab is one lab with an http-forward listener and its servers.
type fwdLab struct {
	*httplab.Forwarder
	proxyURL    string
	origin      *origin.Server
	cacheHits   atomic.Int64 // requests the cacheable server answered
	rawSessions chan error
}

func TestLabHTTPForward(t *testing.T) {
	l := httplab.New(t)
	fl := &fwdLab{proxyURL: "http://" + httplab.FwdAddr(l, proxyPort), rawSessions: make(chan error, 4)}
	fl.origin = httplab.ServeOrigin(t, l, httplab.ServerAddr(l, originPort))
	serveTLS(t, l, httplab.ServerAddr(l, tlsPort))
	serveHandshakes(t, l, httplab.ServerAddr(l, rawPort), fl.rawSessions)
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, cachePort), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fl.cacheHits.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=60")
		fmt.Fprintf(w, "cacheable %s\n", r.URL.Path)
	}))
	httplab.ServeHTTP(t, l, httplab.ServerAddr(l, chunkPort), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 100 {
			fmt.Fprintf(w, "chunk %d\n", i)
			w.(http.Flusher).Flush()
		}
	}))

	lc := httplab.ExampleListener(t, "../../examples/http-forward.yaml", "proxy")
	strict := httplab.Listener("strict", httplab.FwdAddr(l, strictPort), "http-forward")
	strict.HTTP = &config.HTTP{HeaderTimeout: config.Duration(500 * time.Millisecond), MaxHeaders: 20}
	fl.Forwarder = httplab.Start(t, l, lc, strict)

	t.Run("get", fl.testGet)
	t.Run("keep-alive", fl.testKeepAlive)
	t.Run("connect-tls", fl.testConnectTLS)
	t.Run("connect-handshakes", fl.testConnectHandshakes)
	t.Run("connect-port-refused", fl.testConnectPortRefused)
	t.Run("cache", fl.testCache)
	t.Run("chunked", fl.testChunked)
	t.Run("bad-input", fl.testBadInput)
}

// testGet fetches objects from 1 KB to 64 MB with curl and checks every
// byte; bodies larger than what the proxy reads with the head are spliced.
func (fl *fwdLab) testGet(t *testing.T) {
	for _, size := range []int64{1 << 10, 64 << 10, 1 << 20, 64 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			before := fl.Spliced("limit")
			body, err := httplab.Curl(t, fl.Lab, "-x", fl.proxyURL, fl.objectURL(size))
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(body)) != size || sha256.Sum256(body) != origin.ObjectSHA256(size) {
				t.Fatalf("got %d bytes, sha256 mismatch or short (want %d)", len(body), size)
			}
			if size >= 64<<10 {
				// Counted when the splice returns, which may be after
				// curl has the body (the unsplice outlives its last byte).
				testenv.Eventually(t, "the body's splice to return", func() bool { return fl.Spliced("limit")-before >= 1 })
				if got := fl.Spliced("limit") - before; got != 1 {
					t.Errorf("%v splices ended at their byte limit, want 1 (the body)", got)
				}
			}
		})
	}
}

func (fl *fwdLab) objectURL(size int64) string {
	return "http://" + httplab.ServerAddr(fl.Lab, originPort) + origin.ObjectPath(size)
}

// testKeepAlive sends three requests on one client connection (curl reuses
// it for URLs on one command line) and checks the proxy regained control
// after each spliced body.
func (fl *fwdLab) testKeepAlive(t *testing.T) {
	accepted := fl.Metric("splicer_connections_accepted_total", "listener", "proxy")
	before := fl.Spliced("limit")
	sizes := []int64{300 << 10, 1 << 20, 200 << 10}
	args := []string{"-x", fl.proxyURL}
	for _, s := range sizes {
		args = append(args, fl.objectURL(s))
	}
	body, err := httplab.Curl(t, fl.Lab, args...)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, s := range sizes {
		want = append(want, object(s)...)
	}
	if !bytes.Equal(body, want) {
		t.Fatalf("got %d bytes, want the three objects (%d bytes)", len(body), len(want))
	}
	if got := fl.Metric("splicer_connections_accepted_total", "listener", "proxy") - accepted; got != 1 {
		t.Errorf("curl opened %v connections to the proxy, want 1 (keep-alive)", got)
	}
	if got := fl.Spliced("limit") - before; got != 3 {
		t.Errorf("%v bodies spliced with a limit, want 3", got)
	}
}

// object is the body of GET /obj/<size>, fetched straight from the pattern.
func object(size int64) []byte {
	srv := origin.New(nil)
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv.Serve(origin.HTTP, ln)
	resp, err := http.Get("http://" + ln.Addr().String() + origin.ObjectPath(size))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// testConnectTLS fetches over https through a CONNECT tunnel, which the
// proxy splices both ways until it closes (curl may close with the
// server's session ticket unread, which resets, so any end counts).
func (fl *fwdLab) testConnectTLS(t *testing.T) {
	ended := func() float64 { return fl.SplicesEnded() }
	// The keep-alive subtest's last splice may still be returning (its
	// unsplice outlives curl): counted after before, it would make the
	// count below 2 and never 1.
	testenv.Eventually(t, "the earlier splices to end", func() bool { return fl.splicing() == 0 })
	before := ended()
	body, err := httplab.Curl(t, fl.Lab, "-k", "-x", fl.proxyURL, "https://"+httplab.ServerAddr(fl.Lab, tlsPort)+"/hello")
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != "hello over tls\n" {
		t.Fatalf("body %q", body)
	}
	testenv.Eventually(t, "the tunnel's splice to end", func() bool { return ended()-before == 1 })
}

// splicing is how many pairs some engine has spliced now.
func (fl *fwdLab) splicing() float64 {
	var n float64
	for _, e := range fl.Engines.Engines {
		n += fl.Metric("splicer_pairs_spliced", "engine", e.Name())
	}
	return n
}

// testConnectHandshakes runs seed 002's emulated SSL handshakes (Table 3)
// through CONNECT: message sizes in order, each side reading the other's
// message whole before answering.
func (fl *fwdLab) testConnectHandshakes(t *testing.T) {
	for _, hs := range handshakes {
		t.Run(hs.name, func(t *testing.T) {
			c := httplab.Dial(t, fl.Lab, httplab.FwdAddr(fl.Lab, proxyPort))
			c.SetDeadline(time.Now().Add(httplab.WaitFor))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", httplab.ServerAddr(fl.Lab, rawPort))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %v %v", resp, err)
			}
			fl.waitTunnelSpliced(t)
			fmt.Fprintf(c, "%s\n", hs.name) // tells the server which sequence follows
			if err := runHandshake(br, c, hs.msgs, true); err != nil {
				t.Fatal(err)
			}
			c.CloseWrite()
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the handshake: %v, want EOF", err)
			}
			select {
			case err := <-fl.rawSessions:
				if err != nil {
					t.Errorf("server side: %v", err)
				}
			case <-time.After(httplab.WaitFor):
				t.Error("server side never finished")
			}
		})
	}
}

// waitTunnelSpliced waits until /flows shows the only pair of the example's
// listener spliced by an engine (not copied by the proxy in control mode).
func (fl *fwdLab) waitTunnelSpliced(t *testing.T) {
	t.Helper()
	var last []forwarder.Flow
	testenv.Eventually(t, "the tunnel's pair to be spliced", func() bool {
		last = last[:0]
		for _, f := range fl.Flows().Snapshot() {
			if f.Listener == "proxy" {
				last = append(last, f)
			}
		}
		return len(last) == 1 && last[0].State == "spliced" && last[0].Engine != "control"
	})
}

// testConnectPortRefused checks CONNECT outside the allowlist gets 403.
func (fl *fwdLab) testConnectPortRefused(t *testing.T) {
	resp := rawRequest(t, fl.Lab, proxyPort, "CONNECT "+httplab.ServerAddr(fl.Lab, 22)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 403 ") {
		t.Errorf("CONNECT to port 22: %q, want 403", resp)
	}
}

// testCache fetches a cacheable object twice: the second answer comes from
// the cache and the origin sees one request.
func (fl *fwdLab) testCache(t *testing.T) {
	url := "http://" + httplab.ServerAddr(fl.Lab, cachePort) + "/page"
	var heads []string
	for range 2 {
		out, err := httplab.Curl(t, fl.Lab, "-x", fl.proxyURL, "-D", "-", url)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(out), "\r\n\r\ncacheable /page\n") {
			t.Fatalf("response %q", out)
		}
		heads = append(heads, string(out))
	}
	if n := fl.cacheHits.Load(); n != 1 {
		t.Errorf("origin answered %d requests, want 1", n)
	}
	if strings.Contains(heads[0], "X-Cache: HIT") || !strings.Contains(heads[1], "X-Cache: HIT") {
		t.Errorf("X-Cache: first response %q, second %q; want HIT only on the second", heads[0], heads[1])
	}
}

// testChunked relays a chunked response, streamed in control mode.
func (fl *fwdLab) testChunked(t *testing.T) {
	body, err := httplab.Curl(t, fl.Lab, "-x", fl.proxyURL, "http://"+httplab.ServerAddr(fl.Lab, chunkPort)+"/")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(&want, "chunk %d\n", i)
	}
	if string(body) != want.String() {
		t.Errorf("body %q", body)
	}
}

// testBadInput sends what a broken or hostile client sends, each on its own
// connection, and checks the answer and the close; a slowloris connection
// left open meanwhile does not stop another client.
func (fl *fwdLab) testBadInput(t *testing.T) {
	target := "http://" + httplab.ServerAddr(fl.Lab, originPort) + "/obj/10"
	many := ""
	for i := range 30 {
		many += fmt.Sprintf("X-H%d: v\r\n", i)
	}
	for _, tc := range []struct{ name, req, status string }{
		{"malformed", "GET\r\n\r\n", "400"},
		{"bad header line", "GET " + target + " HTTP/1.1\r\nno colon here\r\n\r\n", "400"},
		{"origin-form", "GET /obj/10 HTTP/1.1\r\nHost: x\r\n\r\n", "400"},
		{"too many headers", "GET " + target + " HTTP/1.1\r\n" + many + "\r\n", "431"},
		{"header too large", "GET " + target + " HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n", "431"},
		{"content-length and transfer-encoding", "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := rawRequest(t, fl.Lab, strictPort, tc.req); !strings.HasPrefix(resp, "HTTP/1.1 "+tc.status+" ") {
				t.Errorf("answer %q, want status %s then close", resp, tc.status)
			}
		})
	}
	t.Run("slowloris", func(t *testing.T) {
		c := httplab.Dial(t, fl.Lab, httplab.FwdAddr(fl.Lab, strictPort))
		start := time.Now()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Slow: ", target)
		// Another client of the same listener is served while the slow
		// one holds its pair.
		body, err := httplab.Curl(t, fl.Lab, "-x", "http://"+httplab.FwdAddr(fl.Lab, strictPort), fl.objectURL(1000))
		if err != nil || sha256.Sum256(body) != origin.ObjectSHA256(1000) {
			t.Fatalf("other client during slowloris: %d bytes, %v", len(body), err)
		}
		c.SetReadDeadline(time.Now().Add(httplab.WaitFor))
		resp, err := io.ReadAll(c)
		if !strings.HasPrefix(string(resp), "HTTP/1.1 408 ") || err != nil {
			t.Errorf("slow head got %q, %v; want 408 then close", resp, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("slow head closed after %v, want about the 500ms header timeout", d)
		}
	})
}

// rawRequest sends req to the listener on port on a new connection and returns everything the proxy
// answers until it closes.
func rawRequest(t *testing.T, l *lab.Lab, port uint16, req string) string {
	t.Helper()
	c := httplab.Dial(t, l, httplab.FwdAddr(l, port))
	c.SetDeadline(time.Now().Add(httplab.WaitFor))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read answer: got %q, then %v", resp, err)
	}
	return string(resp)
}

// handshake is one emulated SSL handshake of seed 002's Table 3: message
// sizes in order, positive from the client, negative from the server.
type handshake struct {
	name string
	msgs []int
}

var handshakes = []handshake{
	{"full", []int{98, -2239, 73, -6, 67, -61}},
	{"abbreviated", []int{98, -79, -6, -61, 6, 61}},
}

// runHandshake plays one side of msgs over rw: it writes its own messages
// and reads the other side's, checking their sizes and contents.
func runHandshake(r io.Reader, w io.Writer, msgs []int, client bool) error {
	for i, m := range msgs {
		mine := (m > 0) == client
		n := max(m, -m)
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		if mine {
			if _, err := w.Write(msg); err != nil {
				return fmt.Errorf("message %d: write %d bytes: %w", i, n, err)
			}
			continue
		}
		got := make([]byte, n)
		if _, err := io.ReadFull(r, got); err != nil {
			return fmt.Errorf("message %d: read %d bytes: %w", i, n, err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("message %d: wrong content", i)
		}
	}
	return nil
}

// serveHandshakes plays the server side of the handshake the client names
// on each connection and reports each session's outcome.
func serveHandshakes(tb testing.TB, l *lab.Lab, addr string, done chan<- error) {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	testenv.ServeEach(tb, ln, httplab.WaitFor, func(c net.Conn) {
		br := bufio.NewReader(c)
		name, _ := br.ReadString('\n')
		err := fmt.Errorf("unknown handshake %q", name)
		for _, hs := range handshakes {
			if hs.name+"\n" == name {
				err = runHandshake(br, c, hs.msgs, false)
			}
		}
		if err == nil {
			_, err = br.ReadByte()
			if err == io.EOF {
				err = nil
			} else {
				err = fmt.Errorf("after the handshake: %v, want EOF", err)
			}
		}
		done <- err
	})
}

// serveTLS serves "hello over tls" on addr with a fresh self-signed
// certificate.
func serveTLS(tb testing.TB, l *lab.Lab, addr string) {
	tb.Helper()
	ln, err := l.Server.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over tls\n") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{testenv.SelfSigned(tb, l.Cfg.Server.Addr().String())}},
	}
	httplab.ServeHTTPOn(tb, tls.NewListener(ln, hs.TLSConfig), hs)
}

// Lab tests with curl through the listener of examples/filter.yaml: allowed downloads intact, blocked paths and media types answered 403, /flows says why the pair is never spliced.

package filter_test

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/filter"
)

const example = "../../examples/filter.yaml"

// TestExampleParses keeps the example loadable where the lab cannot run.
func TestExampleParses(t *testing.T) {
	cfg, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	if lc := cfg.Listeners[0]; lc.Proxy != "filter" || lc.Filter == nil || len(lc.Filter.BlockPaths) == 0 || len(lc.Filter.BlockContentTypes) == 0 {
		t.Errorf("listener = %+v, want a filter blocking paths and content types", lc)
	}
}

func TestLabCurl(t *testing.T) {
	l := httplab.New(t)
	var conns, requests atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/obj/{size}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("size"))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(payload(n))
	})
	mux.HandleFunc("/logo.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write(payload(5000))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin "+r.URL.Path) })
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1); mux.ServeHTTP(w, r) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	ln, err := l.Server.Listen("tcp", httplab.ServerAddr(l, 80))
	if err != nil {
		t.Fatal(err)
	}
	httplab.ServeHTTPOn(t, ln, hs)
	f := httplab.Start(t, l, httplab.ExampleListener(t, example, "filter"))
	base := "http://" + f.Addr("filter").String()

	t.Run("allowed downloads on one connection", func(t *testing.T) {
		sizes := []int{1000, 16 << 20, 1}
		c0 := conns.Load()
		for _, size := range sizes {
			out, err := httplab.Curl(t, l, "-f", base+"/obj/"+strconv.Itoa(size))
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(out) != sha256.Sum256(payload(size)) {
				t.Fatalf("/obj/%d: %d bytes with the wrong sha256", size, len(out))
			}
		}
		// Several URLs in one curl run share a keep-alive connection.
		out, err := httplab.Curl(t, l, "-f", base+"/a", base+"/b", base+"/c")
		if err != nil || string(out) != "origin /aorigin /borigin /c" {
			t.Fatalf("three requests in one run: %q, %v", out, err)
		}
		if n := conns.Load() - c0; n != int64(len(sizes))+1 {
			t.Errorf("the origin saw %d connections for %d curl runs", n, len(sizes)+1)
		}
	})
	t.Run("blocked", func(t *testing.T) {
		r0 := requests.Load()
		for path, wantOrigin := range map[string]int64{"/admin/users": 0, "/tools/setup.exe": 0, "/logo.png": 1} {
			r := requests.Load()
			out, err := httplab.Curl(t, l, "-o", "/dev/null", "-w", "%{http_code}", base+path)
			if err != nil || string(out) != "403" {
				t.Errorf("%s: %q, %v; want 403", path, out, err)
			}
			if n := requests.Load() - r; n != wantOrigin {
				t.Errorf("%s: the origin got %d requests, want %d", path, n, wantOrigin)
			}
		}
		t.Logf("origin requests for blocked URLs: %d (only the blocked response type reaches it)", requests.Load()-r0)
	})
	t.Run("flows show copy and why", func(t *testing.T) {
		c := httplab.Dial(t, l, f.Addr("filter").String())
		c.SetDeadline(time.Now().Add(httplab.WaitFor))
		fmt.Fprintf(c, "GET /obj/100000 HTTP/1.1\r\nHost: lab\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		// The filter counts bytes once each write returned, which may be
		// just after the client read them: wait for the count.
		var flows []forwarder.Flow
		testenv.Eventually(t, fmt.Sprintf("/flows counting the %d-byte body", n), func() bool {
			flows = flows[:0]
			for _, fl := range f.Flows().Snapshot() {
				if fl.Listener == "filter" {
					flows = append(flows, fl)
				}
			}
			return len(flows) == 1 && flows[0].BytesDown >= n
		})
		if fl := flows[0]; fl.Engine != "copy" || fl.Note != filter.NoSpliceReason || fl.State != "control" {
			t.Errorf("/flows: engine %q note %q state %q, want copy, %q, control", fl.Engine, fl.Note, fl.State, filter.NoSpliceReason)
		}
	})
	t.Run("bad request", func(t *testing.T) {
		c := httplab.Dial(t, l, f.Addr("filter").String())
		c.SetDeadline(time.Now().Add(httplab.WaitFor))
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: lab\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
		resp, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(resp), "HTTP/1.1 400 ") {
			t.Errorf("Content-Length with Transfer-Encoding: %q, %v; want 400", resp, err)
		}
	})
}

// Admin endpoint tests on loopback: /metrics in Prometheus text, /flows and /upstreams as JSON, /healthz, and Close.

package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/admin"
	"github.com/splicer/splicer/internal/testenv"
)

// TestAdminEndpoints runs a forwarder with one closed and one open pair and
// reads what an operator would: the metrics and the open flow.
func TestAdminEndpoints(t *testing.T) {
	f, srv, upstream := startAdmin(t, admin.Options{})
	base := "http://" + srv.Addr().String()

	done := dial(t, f)
	roundTrip(t, done, "first")
	done.Close()
	open := dial(t, f)
	const msg = "second pair, still open"
	roundTrip(t, open, msg)

	t.Run("flows", func(t *testing.T) {
		var flow map[string]any
		testenv.EventuallyShowing(t, "the open pair's bytes in /flows", func() bool {
			var flows []map[string]any
			getJSON(t, base+"/flows", &flows)
			if len(flows) != 1 {
				return false
			}
			flow = flows[0]
			return flow["bytes_up"] == float64(len(msg)) && flow["bytes_down"] == float64(len(msg))
		}, func() string { return fmt.Sprint(flow) })
		want := map[string]any{
			"listener": "adm",
			"client":   open.LocalAddr().String(),
			"upstream": upstream,
			"state":    "spliced",
		}
		for k, v := range want {
			if flow[k] != v {
				t.Errorf("/flows %s = %v, want %v", k, flow[k], v)
			}
		}
		if e, _ := flow["engine"].(string); e == "" || e == "none" {
			t.Errorf("/flows engine = %v, want the engine forwarding the pair", flow["engine"])
		}
		if age, ok := flow["age_s"].(float64); !ok || age <= 0 {
			t.Errorf("/flows age_s = %v, want a positive number of seconds", flow["age_s"])
		}
	})

	t.Run("metrics", func(t *testing.T) {
		testenv.EventuallyShowing(t, "the first pair counted closed", func() bool {
			return strings.Contains(get(t, base+"/metrics", "text/plain"), `splicer_connections_closed_total{listener="adm",reason="eof"} 1`)
		}, func() string { return "" })
		body := get(t, base+"/metrics", "text/plain")
		for _, want := range []string{
			"# TYPE splicer_connections_accepted_total counter",
			`splicer_connections_accepted_total{listener="adm"} 2`,
			`splicer_connections_active{listener="adm"} 1`,
			// The closed pair's 5 bytes and the open pair's 23 so far:
			// bytes count while pairs run, not when they close.
			`splicer_bytes_total{direction="up",listener="adm"} 28`,
			`splicer_bytes_total{direction="down",listener="adm"} 28`,
			`splicer_upstream_connect_seconds_count{listener="adm"} 2`,
			`splicer_pair_duration_seconds_count{listener="adm"} 1`,
			"splicer_splice_seconds_bucket{",
			`splicer_build_info{goversion="go`,
			"splicer_draining 0",
			"splicer_splice_transitions_total{",
			"splicer_pairs_spliced{",
			"go_goroutines ",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", body)
		}
	})

	t.Run("upstreams", func(t *testing.T) {
		var got []map[string]any
		getJSON(t, base+"/upstreams", &got)
		want := map[string]any{"listener": "adm", "pool": "upstream", "server": upstream, "healthy": true, "skipped": false, "failures": float64(0), "drained": false, "backup": false, "active": float64(1)}
		if len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(want) {
			t.Errorf("/upstreams = %v, want [%v]", got, want)
		}
	})

	t.Run("drain and ready", func(t *testing.T) {
		for _, tc := range []struct {
			path    string
			status  int
			drained bool
		}{
			{"/upstreams/drain", http.StatusBadRequest, false}, // no server named
			{"/upstreams/drain?server=" + upstream + "&pool=other", http.StatusNotFound, false},
			{"/upstreams/drain?server=" + upstream, http.StatusOK, true},
			{"/upstreams/ready?server=" + upstream + "&listener=adm&pool=upstream", http.StatusOK, false},
		} {
			resp, err := http.Post(base+tc.path, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("POST %s: %s, want %d", tc.path, resp.Status, tc.status)
			}
			var got []map[string]any
			getJSON(t, base+"/upstreams", &got)
			if len(got) != 1 || got[0]["drained"] != tc.drained {
				t.Errorf("after POST %s, /upstreams = %v, want drained %v", tc.path, got, tc.drained)
			}
		}
	})

	t.Run("healthz", func(t *testing.T) {
		if body := get(t, base+"/healthz", ""); body != "ok\n" {
			t.Errorf("/healthz = %q, want ok", body)
		}
	})

	t.Run("ready while draining", func(t *testing.T) {
		if body := get(t, base+"/ready", ""); body != "ready\n" {
			t.Errorf("/ready = %q, want ready", body)
		}
		// A shutdown with the open pair still running: the forwarder
		// drains, /ready says 503 so a load balancer stops sending, and
		// /healthz still says the process is alive.
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopped <- f.Shutdown(ctx)
		}()
		testenv.EventuallyShowing(t, "/ready to answer 503", func() bool {
			resp, err := http.Get(base + "/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusServiceUnavailable
		}, func() string { return "" })
		if body := get(t, base+"/healthz", ""); body != "ok\n" {
			t.Errorf("/healthz while draining = %q, want ok", body)
		}
		if !strings.Contains(get(t, base+"/metrics", "text/plain"), "splicer_draining 1") {
			t.Errorf("/metrics lacks splicer_draining 1 while draining")
		}
		open.Close()
		if err := <-stopped; err != nil {
			t.Errorf("shutdown after the last pair closed: %v", err)
		}
	})

	t.Run("close", func(t *testing.T) {
		if err := srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			t.Error("admin still answers after Close")
		}
	})
}

// startAdmin runs a forwarder with a tcp listener "adm" in front of an
// echo upstream, and its admin endpoint with o on a loopback port; it
// returns the forwarder, the endpoint and the upstream's address.
func startAdmin(tb testing.TB, o admin.Options) (f *forwarder.Forwarder, srv *admin.Server, upstream string) {
	tb.Helper()
	upstream = fwdtest.Echo(tb)
	f = fwdtest.Start(tb, fwdtest.TCP("adm", upstream))
	srv = admin.ServeWith(testenv.ListenLoopback(tb), f, slog.New(slog.DiscardHandler), o)
	tb.Cleanup(func() { srv.Close() })
	return f, srv, upstream
}

// dial connects to the forwarder's listener.
func dial(tb testing.TB, f *forwarder.Forwarder) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", f.Addr("adm").String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends msg through the echo upstream and expects it back.
func roundTrip(tb testing.TB, c net.Conn, msg string) {
	tb.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		tb.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		tb.Fatalf("echo of %q: got %q, %v", msg, got, err)
	}
}

// get fetches url, checks the status and the content type's prefix, and
// returns the body.
func get(tb testing.TB, url, contentType string) string {
	tb.Helper()
	resp, body := testenv.Get(tb, url)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, contentType) {
		tb.Fatalf("GET %s: Content-Type %q, want %s", url, ct, contentType)
	}
	return string(body)
}

// getJSON fetches url and decodes its JSON body into v.
func getJSON(tb testing.TB, url string, v any) {
	tb.Helper()
	if err := json.Unmarshal([]byte(get(tb, url, "application/json")), v); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
}

// TestAdminToken: with a token, every endpoint but the probes wants it.
func TestAdminToken(t *testing.T) {
	_, srv, _ := startAdmin(t, admin.Options{Token: "s3cret"})
	base := "http://" + srv.Addr().String()
	status := func(path, auth string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for path, want := range map[string]int{"/metrics": 401, "/flows": 401, "/healthz": 200, "/ready": 200} {
		if got := status(path, ""); got != want {
			t.Errorf("GET %s without the token: %d, want %d", path, got, want)
		}
	}
	if got := status("/flows", "Bearer wrong"); got != 401 {
		t.Errorf("GET /flows with a wrong token: %d, want 401", got)
	}
	if got := status("/flows", "Bearer s3cret"); got != 200 {
		t.Errorf("GET /flows with the token: %d, want 200", got)
	}
}

// TestAdminRefusesBrowsers: without a token, a web page the operator
// opens cannot drain a server, neither cross-site (a foreign Origin, a
// form's content type) nor through a name of its own resolving to
// loopback (DNS rebinding: a foreign Host); Prometheus, which sends no
// Origin, still scrapes, and the endpoint's own origin still drains.
func TestAdminRefusesBrowsers(t *testing.T) {
	_, srv, upstream := startAdmin(t, admin.Options{})
	addr := srv.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	drained := func() bool {
		var got []map[string]any
		getJSON(t, "http://"+addr+"/upstreams", &got)
		return len(got) == 1 && got[0]["drained"] == true
	}
	drain := "/upstreams/drain?server=" + upstream
	for _, tc := range []struct {
		name, method, path, host string
		header                   map[string]string
		status                   int
	}{
		{"foreign Origin", "POST", drain, addr, map[string]string{"Origin": "http://attacker.example"}, http.StatusForbidden},
		{"null Origin", "POST", drain, addr, map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"foreign Host", "POST", drain, "attacker.example:" + port, nil, http.StatusForbidden},
		{"foreign Host without Origin on GET", "GET", "/flows", "attacker.example:" + port, nil, http.StatusForbidden},
		{"another port", "POST", drain, "127.0.0.1:1", nil, http.StatusForbidden},
		{"form body", "POST", drain, addr, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"Prometheus", "GET", "/metrics", addr, nil, http.StatusOK},
		{"localhost", "GET", "/metrics", "localhost:" + port, nil, http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, nil)
		req.Host = tc.host
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %s %s with Host %s: %s, want %d", tc.name, tc.method, tc.path, tc.host, resp.Status, tc.status)
		}
		if drained() {
			t.Fatalf("%s: the server was drained", tc.name)
		}
	}
	req, _ := http.NewRequest("POST", "http://"+addr+drain, nil)
	req.Header.Set("Origin", "http://"+addr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !drained() {
		t.Errorf("POST %s from the endpoint's own origin: %s, drained %v; want 200 and drained", drain, resp.Status, drained())
	}
}

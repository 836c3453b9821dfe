// End-to-end test of `splicer run` in the lab: the example configuration carries iperf3 and curl traffic, admin answers meanwhile, SIGTERM stops it cleanly.

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest/httplab"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

const (
	adminAddr = "127.0.0.1:19901" // inside the forwarder namespace
	grace     = 5 * time.Second   // shutdown_timeout of the test configuration
)

// TestRunInLab runs the binary with examples/tcp.yaml in the lab's forwarder
// namespace, pushes iperf3, an HTTP download with curl and a file with socat
// through it, reads /metrics and /flows while traffic flows, and stops it
// with SIGTERM: once as the example is (engine auto), and once with each
// kernel engine named explicitly, checking /flows shows that engine.
func TestRunInLab(t *testing.T) {
	for _, engine := range []string{"auto", "sockmap", "ip"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			testRunInLab(t, engine)
		})
	}
}

func testRunInLab(t *testing.T, engine string) {
	l := lab.NewT(t, lab.DefaultConfig())
	requireTools(t, map[string]string{"iperf3": "iperf3", "nginx": "nginx", "curl": "curl", "ss": "iproute2", "socat": "socat"})
	bin := splicerBinary(t)
	cfgPath := labConfig(t, "../../examples/tcp.yaml", engine)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logs := &testenv.Buffer{}
	fwd := l.Fwd.Command(ctx, bin, "run", "--config", cfgPath)
	fwd.Stdout, fwd.Stderr = logs, logs
	if err := fwd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- fwd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("splicer log:\n%s", logs)
		}
	})
	admin := adminClient(l)
	waitUntil(t, "the admin endpoint", exited, func() bool {
		_, err := adminGet(admin, "/healthz")
		return err == nil
	})

	t.Run("iperf3", func(t *testing.T) { testIperf3(t, ctx, l, admin, engine) })
	t.Run("curl", func(t *testing.T) { testCurl(t, ctx, l) })
	t.Run("socat", func(t *testing.T) { testSocat(t, ctx, l) })
	if engine != "auto" {
		checkAllSplicedBy(t, admin, engine)
	}

	if err := fwd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExitZero(t, "splicer run after SIGTERM", exited, grace+2*time.Second)
	for _, want := range []string{"msg=\"shutting down\" signal=terminated", "msg=stopped"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s", want)
		}
	}
}

// testIperf3 runs a 2-second iperf3 test through the plug listener (7000 ->
// 10.99.2.2:5201), which carries both its control and data connections, and
// reads the admin endpoints while it runs.
func testIperf3(t *testing.T, ctx context.Context, l *lab.Lab, admin *http.Client, engine string) {
	srv := l.Server.Command(ctx, "iperf3", "-s", "-1", "-B", "10.99.2.2", "-p", "5201")
	srvDone := startCmd(t, srv)
	waitListening(t, l.Server, 5201, srvDone)

	var out, errOut bytes.Buffer
	cli := l.Client.Command(ctx, "iperf3", "-c", "10.99.1.1", "-p", "7000", "-t", "2", "--json")
	cli.Stdout, cli.Stderr = &out, &errOut
	cliDone := startCmd(t, cli)

	// iperf3's control and data connections: two pairs, both spliced.
	var flows []map[string]any
	waitUntil(t, "both iperf3 connections spliced in /flows", cliDone, func() bool {
		body, err := adminGet(admin, "/flows")
		if err != nil || json.Unmarshal(body, &flows) != nil {
			return false
		}
		spliced := 0
		for _, f := range flows {
			if f["listener"] == "plug" && f["state"] == "spliced" {
				spliced++
			}
		}
		return spliced == 2
	})
	for _, f := range flows {
		e := f["engine"]
		if e == "none" || e == "control" || e == "" {
			t.Errorf("/flows: spliced pair with engine %v", e)
		}
		if engine != "auto" && e != engine {
			t.Errorf("/flows: pair spliced by %v (%v), want %s", e, f["note"], engine)
		}
	}
	metrics, err := adminGet(admin, "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics during the transfer: %v", err)
	}
	for _, want := range []string{`splicer_connections_active{listener="plug"} 2`, `splicer_connections_accepted_total{listener="plug"} 2`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics during the transfer lacks %s", want)
		}
	}

	if err := <-cliDone; err != nil {
		t.Fatalf("iperf3 client: %v\n%s%s", err, errOut.String(), out.String())
	}
	var rep struct {
		End struct {
			SumReceived struct {
				Bytes         float64 `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("iperf3 --json output: %v\n%s", err, out.String())
	}
	if rep.Error != "" || rep.End.SumReceived.BitsPerSecond <= 0 {
		t.Fatalf("iperf3 through splicer: %.0f bits/s, error %q", rep.End.SumReceived.BitsPerSecond, rep.Error)
	}
	t.Logf("iperf3 through splicer: %.2f Gbit/s", rep.End.SumReceived.BitsPerSecond/1e9)
	select {
	case err := <-srvDone:
		if err != nil {
			t.Errorf("iperf3 server: %v", err)
		}
	case <-time.After(waitFor):
		t.Error("iperf3 -s -1 did not exit after its one test")
	}
}

// testCurl downloads a 10 MiB file from nginx through the web listener
// (8080 -> 10.99.2.2:80) and compares checksums.
func testCurl(t *testing.T, ctx context.Context, l *lab.Lab) {
	dir := t.TempDir()
	file := make([]byte, 10<<20)
	for i := range file {
		file[i] = byte(i*7 + i>>13)
	}
	writeFile(t, filepath.Join(dir, "www", "file"), file)
	httplab.StartNginx(t, l, dir, "\t\tlisten 10.99.2.2:80;\n\t\troot %[1]s/www;", "10.99.2.2:80")

	got := filepath.Join(dir, "got")
	out, err := l.Client.Command(ctx, "curl", "-sS", "-f", "-o", got, "http://10.99.1.1:8080/file").CombinedOutput()
	if err != nil {
		t.Fatalf("curl through splicer: %v\n%s", err, out)
	}
	body, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(body) != sha256.Sum256(file) {
		t.Fatalf("curl downloaded %d bytes that differ from the %d served", len(body), len(file))
	}
}

// testSocat sends a file with socat through the plug listener (7000 ->
// 10.99.2.2:5201, free again once iperf3's one test is over) to a socat
// that writes it to disk, and compares checksums.
func testSocat(t *testing.T, ctx context.Context, l *lab.Lab) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i*13 + i>>11)
	}
	writeFile(t, src, data)
	srv := l.Server.Command(ctx, "socat", "-u", "TCP-LISTEN:5201,bind=10.99.2.2,reuseaddr", "CREATE:"+dst)
	srvDone := startCmd(t, srv)
	waitListening(t, l.Server, 5201, srvDone)
	out, err := l.Client.Command(ctx, "socat", "-u", "OPEN:"+src, "TCP:10.99.1.1:7000").CombinedOutput()
	if err != nil {
		t.Fatalf("socat through splicer: %v\n%s", err, out)
	}
	select {
	case err := <-srvDone:
		if err != nil {
			t.Fatalf("socat server: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("socat server did not finish after the client's EOF")
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("socat delivered %d bytes that differ from the %d sent", len(got), len(data))
	}
}

// checkAllSplicedBy checks in /metrics that every pair so far (iperf3's two,
// curl's and socat's) was spliced by engine until it closed (iperf3 may end
// its control connection with a reset), none falling back.
func checkAllSplicedBy(t *testing.T, admin *http.Client, engine string) {
	metrics, err := adminGet(admin, "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	ended := 0
	re := regexp.MustCompile(`(?m)^splicer_splice_transitions_total\{engine="` + engine + `",outcome="(eof|reset)"\} (\d+)$`)
	for _, m := range re.FindAllSubmatch(metrics, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		ended += n
	}
	if ended < 4 {
		t.Errorf("/metrics: %d pairs spliced by %s until they closed, want 4 (iperf3 x2, curl, socat)", ended, engine)
	}
	if fb := regexp.MustCompile(`(?m)^splicer_fallbacks_total\{from="` + engine + `".*$`).Find(metrics); fb != nil {
		t.Errorf("/metrics: %s fell back: %s", engine, fb)
	}
}

// labConfig copies the example configuration at path with the admin address
// and shutdown grace the test uses and every listener on engine, and returns
// the copy's path.
func labConfig(tb testing.TB, path, engine string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	for key, value := range map[string]string{"admin": adminAddr, "shutdown_timeout": grace.String()} {
		re := regexp.MustCompile(`(?m)^` + key + `:.*$`)
		if !re.Match(data) {
			tb.Fatalf("%s has no top-level %s key to set", path, key)
		}
		data = re.ReplaceAll(data, []byte(key+": "+value))
	}
	data = regexp.MustCompile(`(?m)^(\s+engine:) auto\b`).ReplaceAll(data, []byte("${1} "+engine))
	// Listeners that leave engine at its default get it too.
	data = regexp.MustCompile(`(?m)^(\s+)(upstream: \[10\.99\.2\.2:80\])$`).ReplaceAll(data, []byte("${1}${2}\n${1}engine: "+engine))
	out := filepath.Join(tb.TempDir(), "splicer.yaml")
	writeFile(tb, out, data)
	return out
}

// requireTools fails (under CI) or skips the test unless every tool is
// installed; tools maps each to its Debian package.
func requireTools(tb testing.TB, tools map[string]string) {
	tb.Helper()
	for tool, pkg := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(tb, fmt.Sprintf("%s not installed (apt-get install %s)", tool, pkg))
		}
	}
}

// adminClient reaches the admin server inside the forwarder namespace.
func adminClient(l *lab.Lab) *http.Client {
	return &http.Client{
		Transport: &http.Transport{DialContext: l.Fwd.Dial, DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
}

// adminGet fetches path from the admin server.
func adminGet(c *http.Client, path string) ([]byte, error) {
	resp, err := c.Get("http://" + adminAddr + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, err
}

// startCmd starts cmd and returns a channel with its Wait result.
func startCmd(tb testing.TB, cmd *exec.Cmd) <-chan error {
	tb.Helper()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// waitFor bounds the waits for processes to come up or finish.
const waitFor = 15 * time.Second

// waitUntil polls cond until it holds; it fails when waitFor passes or the
// process behind exited ends first.
func waitUntil(tb testing.TB, what string, exited <-chan error, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		select {
		case err := <-exited:
			tb.Fatalf("waiting for %s: the process exited: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExitZero waits up to within for a process to exit, and wants exit
// status 0; who names it in the failure.
func waitExitZero(tb testing.TB, who string, exited <-chan error, within time.Duration) {
	tb.Helper()
	select {
	case err := <-exited:
		if err != nil {
			tb.Errorf("%s: %v, want exit status 0", who, err)
		}
	case <-time.After(within):
		tb.Fatalf("%s: still running after %v", who, within)
	}
}

// waitListening waits until a TCP socket listens on port in ns, asking ss
// rather than connecting, since a probe connection would count as a client
// (iperf3 -s -1 serves exactly one).
func waitListening(tb testing.TB, ns *lab.NS, port int, exited <-chan error) {
	tb.Helper()
	waitUntil(tb, fmt.Sprintf("a listener on port %d", port), exited, func() bool {
		out, err := ns.Command(context.Background(), "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		return err == nil && len(bytes.TrimSpace(out)) > 0
	})
}

// writeFile writes data to path, creating its directory.
func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

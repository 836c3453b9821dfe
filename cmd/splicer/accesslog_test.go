// The access log of a running 'splicer run': the combined format as GoAccess reads it, and a rotated file reopened on SIGUSR1.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/lab"
	"github.com/splicer/splicer/origin"
)

// accessLogYAML is a daemon configuration with an access log at path in
// format, and listeners.
func accessLogYAML(s *site, path, format string, listeners ...string) string {
	return fmt.Sprintf("access_log: {path: %s, format: %s}\n", path, format) + daemonYAML(s, "5s", listeners...)
}

// reverseYAML is an http-reverse listener at listen with one pool, up.
func reverseYAML(name, listen, up string) string {
	return fmt.Sprintf("  - {name: %s, listen: '%s', proxy: http-reverse, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}\n", name, listen, up)
}

// lineCount is the number of lines in the file at path (0 if missing).
func lineCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// TestAccessLogCombinedReadByGoAccess: requests through an http-reverse
// listener in the lab, from curl (a query, a 404, a user agent with
// quotes, a referer) and a pair of a tcp listener, logged in the
// combined format, are read by GoAccess's COMBINED format without one
// invalid line, and it counts every one.
func TestAccessLogCombinedReadByGoAccess(t *testing.T) {
	requireTools(t, map[string]string{"goaccess": "goaccess", "curl": "curl"})
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	web, plug := net.JoinHostPort(s.fwdIP, "18080"), net.JoinHostPort(s.fwdIP, "17000")
	path := filepath.Join(t.TempDir(), "access.log")
	s.startRun(t, accessLogYAML(s, path, "combined", reverseYAML("web", web, s.upstream(t, origin.HTTP)),
		listenerYAML("plug", plug, s.upstream(t, origin.Echo), "auto")))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := "http://" + web
	curls := [][]string{
		{base + "/obj/100?x=1&y=%22", base + "/obj/1000", base + "/nothing-here"}, // one connection, three requests
		{"-A", `agent "with" quotes \ and a backslash`, "-e", "http://referer.example/page?q=1", base + "/obj/10"},
		{"-X", "POST", "-d", "body", base + "/obj/10"},
		{"--http1.0", base + "/obj/0"},
	}
	requests := 0
	for _, args := range curls {
		cmdArgs := []string{"-sS"}
		for _, a := range args {
			if strings.HasPrefix(a, base) {
				cmdArgs = append(cmdArgs, "-o", "/dev/null")
				requests++
			}
			cmdArgs = append(cmdArgs, a)
		}
		if out, err := l.Client.Command(ctx, "curl", cmdArgs...).CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
	}
	if err := s.ping(plug); err != nil {
		t.Fatal(err)
	}
	want := requests + 1 // and the tcp pair's line
	waitUntil(t, fmt.Sprintf("%d access log lines", want), nil, func() bool { return lineCount(path) >= want })
	time.Sleep(200 * time.Millisecond) // no more lines come
	if n := lineCount(path); n != want {
		t.Errorf("%d access log lines, want %d", n, want)
	}

	invalid := filepath.Join(t.TempDir(), "invalid")
	var stderr strings.Builder
	cmd := exec.Command("goaccess", path, "--log-format=COMBINED", "--no-global-config",
		"--invalid-requests="+invalid, "-o", "json")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		log, _ := os.ReadFile(path)
		t.Fatalf("goaccess: %v\n%s\naccess log:\n%s", err, stderr.String(), log)
	}
	var report struct {
		General struct {
			Total  int `json:"total_requests"`
			Valid  int `json:"valid_requests"`
			Failed int `json:"failed_requests"`
		} `json:"general"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("goaccess's report: %v\n%s", err, out)
	}
	bad, _ := os.ReadFile(invalid)
	if g := report.General; g.Total != want || g.Valid != want || g.Failed != 0 || len(bad) > 0 {
		log, _ := os.ReadFile(path)
		t.Errorf("goaccess read %d lines, %d valid, %d invalid (%q); want %d, all valid\naccess log:\n%s",
			g.Total, g.Valid, g.Failed, bad, want, log)
	}
}

// TestAccessLogReopenOnSIGUSR1: after the access log is moved away and
// SIGUSR1 sent, new lines go to a new file at its path and the moved
// one keeps what it had, unchanged; with workers too, whose master
// passes the signal on.
func TestAccessLogReopenOnSIGUSR1(t *testing.T) {
	for _, workers := range []int{0, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			t.Parallel()
			testReopenOnSIGUSR1(t, workers)
		})
	}
}

func testReopenOnSIGUSR1(t *testing.T, workers int) {
	s := loopbackSite(t)
	web := freeLoopback(t)
	path := filepath.Join(t.TempDir(), "access.log")
	cfg := accessLogYAML(s, path, "combined", reverseYAML("web", web, s.upstream(t, origin.HTTP)))
	if workers > 0 {
		cfg = fmt.Sprintf("workers: %d\n", workers) + cfg
	}
	d := s.startRun(t, cfg)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	get := func(n int, tag string) {
		for i := range n {
			resp, err := client.Get(fmt.Sprintf("http://%s/obj/10?%s=%d", web, tag, i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	get(3, "before")
	waitUntil(t, "3 access log lines", d.exited, func() bool { return lineCount(path) == 3 })
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	reopened := max(workers, 1)
	waitUntil(t, "the access log reopened", d.exited, func() bool {
		return strings.Count(d.logs(), "access log reopened") == reopened
	})
	get(2, "after")
	waitUntil(t, "2 lines in the new access log", d.exited, func() bool { return lineCount(path) == 2 })
	time.Sleep(200 * time.Millisecond) // nothing more comes to either
	now, _ := os.ReadFile(rotated)
	if string(now) != string(old) {
		t.Errorf("the moved access log changed:\nbefore the signal:\n%s\nnow:\n%s", old, now)
	}
	if b, _ := os.ReadFile(path); lineCount(path) != 2 || strings.Contains(string(b), "before=") {
		t.Errorf("the new access log holds:\n%s\nwant the 2 requests after the signal", b)
	}
}

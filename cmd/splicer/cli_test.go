// Tests of the splicer commands as a user runs them, in this process (splicerIn): check on good and broken configurations, usage, help; and the helpers that run the binary.

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

// bins holds the binary built once for every test of this package.
var bins testenv.Binaries

func TestMain(m *testing.M) { bins.Main(m) }

// splicerBinary builds ./cmd/splicer once and returns the binary's path.
func splicerBinary(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(bins.Build(tb, map[string]string{".": "splicer"}), "splicer")
}

// splicer runs the binary with args and returns its output and exit code.
func splicer(tb testing.TB, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	return testenv.Run(tb, splicerBinary(tb), args...)
}

// splicerIn runs the command args in this process, as the binary would
// (run), and returns its output and exit code.
func splicerIn(tb testing.TB, args ...string) (stdout, stderr string, code int) {
	tb.Helper()
	var out, errOut bytes.Buffer
	code = run(env{stdout: &out, stderr: &errOut, getenv: func(string) (string, bool) { return "", false }}, args)
	return out.String(), errOut.String(), code
}

// brokenProblems says, for words of each "# ERROR:" marker in
// examples/broken.yaml, what check's message for that line must contain.
var brokenProblems = []struct{ marker, says string }{
	{"missing port", "missing port"},
	{"unknown value", `unknown value "verbose"`},
	{"invalid duration", `invalid duration "30": missing unit`},
	{`unknown unit "KB"`, `unknown unit "KB"`},
	{"unknown key", `unknown key "conect_timeout"`},
	{"duplicate listener name", `duplicate listener name "plug"`},
	{"conflicts with the listen address", "10.99.1.1:7000 of listeners[0]"},
	{"expected a list", "expected a list"},
	{"unknown engine", `unknown engine "splice"`},
	{"missing required key name", `missing required key "name"`},
	{"expected an integer", "expected an integer"},
}

// TestCheckBrokenConfig: every mistake marked in examples/broken.yaml is
// reported on its own line with the file, the marked line and the problem,
// and check exits 1.
func TestCheckBrokenConfig(t *testing.T) {
	t.Parallel()
	const path = "../../examples/broken.yaml"
	markers := errorMarkers(t, path)
	_, stderr, code := splicerIn(t, "check", "--config", path)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	reported := map[int]string{}
	lineRE := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:(\d+):`)
	for _, ln := range strings.Split(stderr, "\n") {
		if m := lineRE.FindStringSubmatch(ln); m != nil {
			n, _ := strconv.Atoi(m[1])
			if reported[n] != "" {
				t.Errorf("line %d reported twice:\n%s\n%s", n, reported[n], ln)
			}
			reported[n] = ln
		}
	}
	for line, marker := range markers {
		msg, ok := reported[line]
		if !ok {
			t.Errorf("broken.yaml:%d (%s) not reported", line, marker)
			continue
		}
		says := ""
		for _, p := range brokenProblems {
			if strings.Contains(marker, p.marker) {
				says = p.says
			}
		}
		if says == "" {
			t.Errorf("broken.yaml:%d: no expectation for marker %q; add one to brokenProblems", line, marker)
		} else if !strings.Contains(msg, says) {
			t.Errorf("broken.yaml:%d: message %q does not say %q", line, msg, says)
		}
	}
	for line, msg := range reported {
		if _, ok := markers[line]; !ok {
			t.Errorf("error reported on unmarked line %d: %s", line, msg)
		}
	}
	if want := strconv.Itoa(len(markers)) + " error(s)"; !strings.Contains(stderr, want) {
		t.Errorf("no summary %q in:\n%s", want, stderr)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}

// errorMarkers returns the "# ERROR:" comments of path by line number.
func errorMarkers(tb testing.TB, path string) map[int]string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	markers := map[int]string{}
	for i, ln := range strings.Split(string(data), "\n") {
		if _, marker, ok := strings.Cut(ln, "# ERROR:"); ok {
			markers[i+1] = strings.TrimSpace(marker)
		}
	}
	if len(markers) == 0 {
		tb.Fatalf("%s has no # ERROR: markers", path)
	}
	return markers
}

// TestCheckValidConfig: the example configuration passes and is summarised.
func TestCheckValidConfig(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := splicerIn(t, "check", "--config", "../../examples/tcp.yaml")
	if code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"ok, 2 listener(s)", "plug: tcp proxy on 10.99.1.1:7000 -> [10.99.2.2:5201]", "web: tcp proxy on 10.99.1.1:8080"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestCheckSummarisesWorkersAndQueue: check says how workers count the
// limits, and how long a client waits for a full upstream list.
func TestCheckSummarisesWorkersAndQueue(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.yaml")
	writeFile(t, path, []byte(`workers: 2
listeners:
  - name: db
    listen: 127.0.0.1:7000
    upstream: [{address: 10.0.0.1:5432, max_conns: 20}, 10.0.0.2:5432]
    queue_timeout: 5s
    max_queue: 100
    max_connections_per_client: 8
`))
	stdout, stderr, code := splicerIn(t, "check", "--engines=false", path)
	if code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"workers: 2 processes share every listener (SO_REUSEPORT); max_connections, max_conns, max_queue and max_fails count per worker, max_connections_per_client across them",
		"db: tcp proxy on 127.0.0.1:7000 -> [10.0.0.1:5432 (max_conns 20), 10.0.0.2:5432], every one full: queued up to 5s (at most 100 waiting)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestCheckMissingFile: a configuration that cannot be read is an error
// naming the file.
func TestCheckMissingFile(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, stderr, code := splicerIn(t, "check", "--config", missing)
	if code != 1 || !strings.Contains(stderr, missing) {
		t.Errorf("check of a missing file: exit %d, stderr %q; want 1 and the file named", code, stderr)
	}
}

// TestUsage: commands without what they need print their usage and fail;
// --help lists every command.
func TestUsage(t *testing.T) {
	t.Parallel()
	for cmd, usage := range map[string]string{"check": "Usage: splicer check [--engines=false] FILE...", "run": "Usage: splicer run --config FILE"} {
		_, stderr, code := splicerIn(t, cmd)
		if code == 0 || !strings.Contains(stderr, usage) {
			t.Errorf("splicer %s without a file: exit %d, stderr %q; want non-zero and its usage", cmd, code, stderr)
		}
	}
	// Arguments a command does not take are refused, not ignored.
	if _, stderr, code := splicerIn(t, "run", "--config", "x.yaml", "extra"); code == 0 || !strings.Contains(stderr, "Usage: splicer run") {
		t.Errorf("splicer run with an extra argument: exit %d, stderr %q; want its usage and a failure", code, stderr)
	}
	// help COMMAND prints the command's options, where help goes: stdout.
	if stdout, _, code := splicerIn(t, "help", "reload"); code != 0 || !strings.Contains(stdout, "Usage: splicer reload") || !strings.Contains(stdout, "--pid-file") {
		t.Errorf("splicer help reload: exit %d, %q", code, stdout)
	}
	stdout, _, code := splicerIn(t, "--help")
	if code != 0 {
		t.Errorf("splicer --help: exit %d, want 0", code)
	}
	for _, cmd := range []string{"run", "check", "reload", "upgrade", "demo", "bench", "version", "completion"} {
		if !strings.Contains(stdout, "splicer "+cmd) {
			t.Errorf("splicer --help does not list %s:\n%s", cmd, stdout)
		}
	}
	if _, stderr, code := splicerIn(t, "frobnicate"); code == 0 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
}

// TestCheckSeveralFiles: every file is checked, each error named with its
// file, the exit status is 1 if any is broken, and flags may follow files.
func TestCheckSeveralFiles(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := splicerIn(t, "check", "../../examples/tcp.yaml", "../../examples/broken.yaml", "--engines=false")
	if code != 1 {
		t.Errorf("check of a good and a broken file: exit %d, want 1", code)
	}
	if !strings.Contains(stdout, "examples/tcp.yaml: ok") || !strings.Contains(stderr, "examples/broken.yaml:") {
		t.Errorf("check of two files: stdout %q, stderr %q; want the good one ok and the broken one's errors", stdout, stderr)
	}
	if strings.Contains(stdout, "engines on this host") {
		t.Errorf("--engines=false after the files was ignored")
	}
	stdout, _, code = splicerIn(t, "check", "-c", "../../examples/tcp.yaml", "--config", "../../examples/http-reverse.yaml")
	if code != 0 || !strings.Contains(stdout, "examples/http-reverse.yaml: ok") || !strings.Contains(stdout, "listener plug: engine ") {
		t.Errorf("check -c A --config B: exit %d, stdout %q; want both ok and each listener's engine", code, stdout)
	}
}

// TestCheckNamesEachListenersEngine: check says which engine a listener
// starts with and what it falls back to; copy, the last, has none to name.
func TestCheckNamesEachListenersEngine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "engines.yaml")
	if err := os.WriteFile(path, []byte("listeners:\n  - {name: c, listen: '127.0.0.1:1', upstream: ['127.0.0.1:2'], engine: copy}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := splicerIn(t, "check", path)
	if want := "listener c: engine copy (as configured; no fallback: it always runs)"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("check: exit %d, stdout %q, stderr %q; want a line %q", code, stdout, stderr, want)
	}
}

// TestHelp: help, help COMMAND and COMMAND --help explain, and exit 0;
// a command splicer lacks, asked for or run, fails and lists the
// commands there are.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "splicer run --config FILE"}, {[]string{"--help"}, "splicer run --config FILE"},
		{[]string{"help", "run"}, "Usage: splicer run"}, {[]string{"run", "--help"}, "Usage: splicer run"},
		{[]string{"run", "-h"}, "Usage: splicer run"}, {[]string{"help", "check"}, "Usage: splicer check"},
		{[]string{"check", "--help"}, "Usage: splicer check"},
	} {
		stdout, stderr, code := splicerIn(t, c.args...)
		if code != 0 || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, "Options:\n") || stderr != "" {
			t.Errorf("splicer %v: exit %d, stdout %q, stderr %q; want 0 and %q with the options", c.args, code, stdout, stderr, c.want)
		}
	}
	for _, args := range [][]string{{"help", "bogus"}, {"bogus"}, {"bogus", "--config", "x.yaml"}} {
		stdout, stderr, code := splicerIn(t, args...)
		if code != 2 || !strings.Contains(stderr, `unknown command "bogus"`) || stdout != "" {
			t.Errorf("splicer %v: exit %d, stdout %q, stderr %q; want 2 and the unknown command named", args, code, stdout, stderr)
		}
		for _, cmd := range []string{"run", "check", "reload", "upgrade", "upstreams", "completion", "version"} {
			if !strings.Contains(stderr, "splicer "+cmd) {
				t.Errorf("splicer %v does not list command %s:\n%s", args, cmd, stderr)
			}
		}
	}
	if _, stderr, _ := splicerIn(t, "chek"); !strings.Contains(stderr, "did you mean check?") {
		t.Errorf("splicer chek: %q, want check suggested", stderr)
	}
	if _, stderr, code := splicerIn(t, "run", "--nope"); code != 2 || !strings.Contains(stderr, "unknown flag: --nope") || !strings.Contains(stderr, "Usage: splicer run") {
		t.Errorf("splicer run --nope: exit %d, stderr %q; want 2, the flag and run's usage", code, stderr)
	}
}

// TestLongFlagsTakeOneDash: the single-dash long flags splicer has always
// read still mean what they did.
func TestLongFlagsTakeOneDash(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := splicerIn(t, "check", "-engines=false", "-config", "../../examples/tcp.yaml")
	if code != 0 || !strings.Contains(stdout, "examples/tcp.yaml: ok") || strings.Contains(stdout, "engines on this host") {
		t.Errorf("check -engines=false -config FILE: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if stdout, _, code := splicerIn(t, "-version"); code != 0 || !strings.HasPrefix(stdout, "splicer ") {
		t.Errorf("splicer -version: exit %d, %q", code, stdout)
	}
}

// TestCompletion: bash loads its script and binds it to splicer; zsh and
// fish get theirs; the scripts ask splicer itself (cobra's __complete),
// which offers the commands, a command's flags and help's topics.
func TestCompletion(t *testing.T) {
	t.Parallel()
	bin := splicerBinary(t)
	cmd := exec.Command("bash", "-c", "source <(splicer completion bash) && complete -p splicer")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "complete -o default -F __start_splicer splicer") {
		t.Errorf("bash sourcing splicer completion bash: %v\n%s", err, out)
	}
	for shell, want := range map[string]string{"zsh": "#compdef splicer", "fish": "complete -c splicer"} {
		if out, _, code := splicerIn(t, "completion", shell); code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "__complete") {
			t.Errorf("splicer completion %s: exit %d:\n%s", shell, code, out)
		}
	}
	if _, stderr, code := splicerIn(t, "completion", "tcsh"); code == 0 || !strings.Contains(stderr, "Usage: splicer completion bash|zsh|fish") {
		t.Errorf("splicer completion tcsh: exit %d, stderr %q; want its usage and a failure", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{""}, []string{"run\t", "check\t", "reload\t", "upgrade\t", "upstreams\t", "hash-password\t", "completion\t", "help\t", "version\t"}},
		{[]string{"upstreams", "--"}, []string{"--admin\t", "--drain\t", "--ready\t", "--json\t", "--token\t"}},
		{[]string{"check", "--"}, []string{"--config\t", "--engines\t"}},
		{[]string{"help", "up"}, []string{"upgrade\t", "upstreams\t"}},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
	} {
		out, _, code := splicerIn(t, append([]string{"__complete"}, c.args...)...)
		for _, w := range c.want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("splicer __complete %q: exit %d, no %q in:\n%s", c.args, code, w, out)
			}
		}
	}
}

// TestCommandStaysSmall: the command's code (not its tests) stays under
// 1,200 lines: what grows belongs in a package of its own.
func TestCommandStaysSmall(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("*.go")
	lines := 0
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(b, []byte("\n"))
		}
	}
	if lines > 1200 {
		t.Errorf("cmd/splicer has %d lines of code, more than 1,200", lines)
	}
}

// TestCheckSaysTLSPath: for a listener that terminates TLS, check says
// its bytes are decrypted in user space and whether this kernel has kTLS.
func TestCheckSaysTLSPath(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := splicer(t, "check", "../../examples/https.yaml")
	want := "listener secure: tls: terminated in user space (crypto/tls); bodies copied, never spliced; kTLS "
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("check: exit %d, stdout %q, stderr %q; want a line starting %q", code, stdout, stderr, want)
	}
	if stdout, _, _ := splicer(t, "check", "../../examples/http-reverse.yaml"); strings.Contains(stdout, " tls: ") {
		t.Errorf("check of a listener without tls: stdout %q, want no tls line", stdout)
	}
}

// TestHelpHidesTheToken: the admin token in the environment is a secret;
// a command's help must not print it as the --token default.
func TestHelpHidesTheToken(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-token-value"
	for _, cmd := range []string{"reload", "upgrade", "upstreams"} {
		var out, errOut bytes.Buffer
		getenv := func(k string) (string, bool) { return secret, k == "SPLICER_ADMIN_TOKEN" }
		run(env{stdout: &out, stderr: &errOut, getenv: getenv}, []string{cmd, "--help"})
		if strings.Contains(out.String()+errOut.String(), secret) {
			t.Errorf("splicer %s --help prints the token from $SPLICER_ADMIN_TOKEN", cmd)
		}
	}
}

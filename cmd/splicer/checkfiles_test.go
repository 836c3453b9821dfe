// splicer check refuses what run would refuse before it serves: an admin address a listener takes, files named that the user cannot use; each at its FILE:LINE:COL, and run refuses the same file.

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
)

// TestCheckRefusesWhatRunRefuses: for each file, check exits 1 with the
// problem at the key's line and column, and run exits 1 without
// serving; fixed, check passes.
func TestCheckRefusesWhatRunRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen, other := freeLoopback(t), freeLoopback(t)
	_, port, _ := strings.Cut(listen, ":")
	writeFile(t, filepath.Join(dir, "token"), []byte("s3cret\n"))
	writeFile(t, filepath.Join(dir, "empty-token"), []byte("\n"))
	listener := fmt.Sprintf("listeners:\n  - {name: a, listen: '%s', upstream: ['127.0.0.1:1']}\n", listen)
	for _, tc := range []struct {
		name, head, fixed string
		at                string // FILE:LINE:COL: key: ...
		says              string
	}{
		{"admin on the listener's address", "admin: " + listen + "\n", "admin: " + other + "\n",
			":1:8: admin: ", "admin address " + listen + " is the same address as listen address " + listen + " of listeners[0] on line 3; both cannot be bound"},
		{"admin under a wildcard listener", "admin: 127.0.0.1:" + port + "\n", "admin: " + other + "\n",
			":1:8: admin: ", "admin address 127.0.0.1:" + port + " overlaps listen address 0.0.0.0:" + port},
		{"missing admin_token_file", "admin_token_file: nope\n", "admin_token_file: token\n",
			":1:19: admin_token_file: ", "open " + filepath.Join(dir, "nope") + ": no such file or directory"},
		{"empty admin_token_file", "admin_token_file: empty-token\n", "admin_token_file: token\n",
			":1:19: admin_token_file: ", filepath.Join(dir, "empty-token") + " is empty"},
		{"access log in a missing directory", "access_log:\n  path: " + dir + "/no/access.log\n", "access_log:\n  path: " + dir + "/access.log\n",
			":2:9: access_log.path: ", "cannot create " + dir + "/no/access.log: " + dir + "/no: no such file or directory"},
		{"access log a directory", "access_log: {path: " + dir + "}\n", "access_log: {path: '-'}\n",
			":1:20: access_log.path: ", dir + " is a directory"},
	} {
		body := listener
		if strings.Contains(tc.name, "wildcard") {
			body = strings.Replace(listener, listen, "0.0.0.0:"+port, 1)
		}
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		writeFile(t, path, []byte(tc.head+body))
		want := path + tc.at + tc.says
		_, stderr, code := splicerIn(t, "check", "--engines=false", path)
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("%s: check: exit %d, stderr %q; want 1 and %q", tc.name, code, stderr, want)
		}
		if stderr, code := splicerWithin(t, 15*time.Second, "run", "--config", path); code != 1 {
			t.Errorf("%s: run: exit %d, stderr %q; want 1", tc.name, code, stderr)
		}
		writeFile(t, path, []byte(tc.fixed+body))
		if _, stderr, code := splicerIn(t, "check", "--engines=false", path); code != 0 {
			t.Errorf("%s, fixed: check: exit %d, stderr %q; want 0", tc.name, code, stderr)
		}
	}
}

// TestCheckAsTheDaemonsUser: files the user running check may not read
// or write (the daemon's user, as the unit's ExecStartPre runs it) are
// refused, though root could use them.
func TestCheckAsTheDaemonsUser(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	os.Chmod(filepath.Dir(splicerBinary(t)), 0o755) // nobody runs it
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	token, logs := filepath.Join(dir, "token"), filepath.Join(dir, "logs")
	writeFile(t, token, []byte("s3cret\n"))
	os.Chmod(token, 0o600)
	os.Mkdir(logs, 0o755)
	path := filepath.Join(dir, "splicer.yaml")
	writeFile(t, path, fmt.Appendf(nil, "admin_token_file: %s\naccess_log: {path: %s/access.log}\nlisteners:\n  - {name: a, listen: '%s', upstream: ['127.0.0.1:1']}\n",
		token, logs, freeLoopback(t)))
	if _, stderr, code := splicerIn(t, "check", "--engines=false", path); code != 0 {
		t.Fatalf("check as root: exit %d, stderr %q; want 0", code, stderr)
	}
	cmd := exec.Command(splicerBinary(t), "check", "--engines=false", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("check as nobody: %v, want exit status 1", err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(regexp.QuoteMeta(path) + `:1:19: admin_token_file: open ` + regexp.QuoteMeta(token) + `: permission denied`),
		regexp.MustCompile(regexp.QuoteMeta(path) + `:2:20: access_log.path: cannot create ` + regexp.QuoteMeta(logs+"/access.log: "+logs) + `: permission denied`),
	} {
		if !want.MatchString(stderr.String()) {
			t.Errorf("check as nobody says:\n%s\nwant a line matching %s", stderr.String(), want)
		}
	}
}

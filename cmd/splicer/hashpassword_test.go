// Tests of splicer hash-password: the printed hash checks the password given on standard input and no other.

package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/splicer/splicer/proxy/socks5/passwd"
)

func hashPassword(tb testing.TB, stdin string, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	cmd := exec.Command(splicerBinary(tb), append([]string{"hash-password"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func TestHashPassword(t *testing.T) {
	out, stderr, err := hashPassword(t, "wonderland\n", "-iterations", "2000")
	if err != nil {
		t.Fatalf("hash-password: %v: %s", err, stderr)
	}
	h, err := passwd.Parse(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q is not a hash: %v", out, err)
	}
	if h.Iterations != 2000 || !h.Matches("wonderland") || h.Matches("wonderland\n") {
		t.Errorf("hash %s: iterations %d, matches the password %v", out, h.Iterations, h.Matches("wonderland"))
	}
	if _, stderr, err := hashPassword(t, "\n"); err == nil || !strings.Contains(stderr, "empty password") {
		t.Errorf("empty password: err %v, stderr %q", err, stderr)
	}
	if _, stderr, err := hashPassword(t, "pw\n", "-iterations", "10"); err == nil || !strings.Contains(stderr, "minimum") {
		t.Errorf("10 iterations: err %v, stderr %q", err, stderr)
	}
}

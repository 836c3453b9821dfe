// Tests of splicer hash-password: the printed hash (bcrypt unless told otherwise) checks the password given on standard input and no other.

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
	out, stderr, err := hashPassword(t, "wonderland\n")
	if err != nil {
		t.Fatalf("hash-password: %v: %s", err, stderr)
	}
	h, err := passwd.Parse(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q is not a hash: %v", out, err)
	}
	if b, ok := h.(passwd.Bcrypt); !ok || !h.Matches("wonderland") || h.Matches("wonderland\n") {
		t.Errorf("hash %s: %T (want bcrypt, the default), matches the password %v", out, b, h.Matches("wonderland"))
	}
	out, stderr, err = hashPassword(t, "wonderland\n", "-scheme", "pbkdf2-sha256", "-iterations", "2000")
	if err != nil {
		t.Fatalf("hash-password -scheme pbkdf2-sha256: %v: %s", err, stderr)
	}
	if h, err := passwd.Parse(strings.TrimSpace(out)); err != nil || h.(passwd.PBKDF2).Iterations != 2000 || !h.Matches("wonderland") {
		t.Errorf("hash-password -scheme pbkdf2-sha256 -iterations 2000: %q, %v", out, err)
	}
	if _, stderr, err := hashPassword(t, "\n"); err == nil || !strings.Contains(stderr, "empty password") {
		t.Errorf("empty password: err %v, stderr %q", err, stderr)
	}
	for _, args := range [][]string{{"-scheme", "pbkdf2-sha256", "-iterations", "10"}, {"-cost", "20"}, {"-iterations", "2000"}} {
		if _, stderr, err := hashPassword(t, "pw\n", args...); err == nil || stderr == "" {
			t.Errorf("hash-password %v: err %v, stderr %q; want refused", args, err, stderr)
		}
	}
}

// -user prints a users_file line, argon2id on request.
func TestHashPasswordUsersFileLine(t *testing.T) {
	out, stderr, err := hashPassword(t, "builder\n", "-scheme", "argon2id", "-user", "bob")
	if err != nil {
		t.Fatalf("hash-password: %v: %s", err, stderr)
	}
	user, hash, _ := strings.Cut(strings.TrimSpace(out), ":")
	h, err := passwd.Parse(hash)
	if err != nil || user != "bob" || !strings.HasPrefix(hash, "$argon2id$") || !h.Matches("builder") {
		t.Errorf("hash-password -scheme argon2id -user bob: %q (%v); want bob:$argon2id$... matching builder", out, err)
	}
}

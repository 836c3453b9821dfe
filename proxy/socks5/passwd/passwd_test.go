// Tests that hashes round-trip, wrong passwords and unknown users fail, and malformed hashes are refused with a reason.

package passwd

import (
	"strings"
	"testing"
)

func TestHashMatchesOnlyItsPassword(t *testing.T) {
	s, err := New("s3cret", MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%q): %v", s, err)
	}
	if !h.Matches("s3cret") {
		t.Error("the password does not match its own hash")
	}
	for _, wrong := range []string{"", "s3cre", "s3cret ", "S3cret"} {
		if h.Matches(wrong) {
			t.Errorf("%q matches the hash of s3cret", wrong)
		}
	}
	if h.String() != s {
		t.Errorf("String() = %q, want %q", h.String(), s)
	}
}

func TestSaltDiffersPerHash(t *testing.T) {
	a, _ := New("same", MinIterations)
	b, _ := New("same", MinIterations)
	if a == b {
		t.Errorf("two hashes of the same password are equal (%s): no salt", a)
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	good, _ := New("x", MinIterations)
	f := strings.Split(good, "$")
	for _, c := range []struct{ in, want string }{
		{"plaintext", "not a password hash"},
		{"bcrypt$10$a$b", "not a password hash"},
		{strings.Join([]string{f[0], "10", f[2], f[3]}, "$"), "iterations"},
		{strings.Join([]string{f[0], "many", f[2], f[3]}, "$"), "iterations"},
		{strings.Join([]string{f[0], f[1], "!!", f[3]}, "$"), "salt"},
		{strings.Join([]string{f[0], f[1], f[2], f[3][:10]}, "$"), "key"},
	} {
		if _, err := Parse(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error about %s", c.in, err, c.want)
		}
	}
}

func TestVerifier(t *testing.T) {
	alice, _ := New("wonderland", MinIterations)
	v, err := NewVerifier(map[string]string{"alice": alice})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, pass string
		ok         bool
	}{
		{"alice", "wonderland", true},
		{"alice", "wrong", false},
		{"bob", "wonderland", false},
		{"bob", "", false}, // the decoy is a hash of "": an unknown user must still fail
	} {
		if got := v.Check(c.user, c.pass); got != c.ok {
			t.Errorf("Check(%q, %q) = %v, want %v", c.user, c.pass, got, c.ok)
		}
	}
	if _, err := NewVerifier(map[string]string{"eve": "plain"}); err == nil || !strings.Contains(err.Error(), `"eve"`) {
		t.Errorf("NewVerifier with a malformed hash = %v, want an error naming the user", err)
	}
}

func BenchmarkDefaultIterations(b *testing.B) {
	h, _ := Parse(must(New("pw", 0)))
	for b.Loop() {
		h.Matches("pw")
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// Each scheme's hashes round-trip and match only their password, hashes made by other tools (htpasswd -B, the argon2 reference CLI) are read, and costs out of bounds are refused.

package passwd

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/splicer/splicer/internal/testenv"
)

func TestSchemesMatchOnlyTheirPassword(t *testing.T) {
	for name, make := range map[string]func(string) (string, error){
		"bcrypt":   func(pw string) (string, error) { return NewBcrypt(pw, MinBcryptCost) },
		"argon2id": func(pw string) (string, error) { return NewArgon2id(pw, Argon2Params{Memory: 64, Time: 1, Threads: 1}) },
		"pbkdf2":   func(pw string) (string, error) { return New(pw, MinIterations) },
	} {
		s, err := make("s3cret")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, err := Parse(s)
		if err != nil {
			t.Fatalf("%s: Parse(%q): %v", name, s, err)
		}
		if !h.Matches("s3cret") || h.String() != s {
			t.Errorf("%s: %q does not match its own password, or String() = %q", name, s, h.String())
		}
		for _, wrong := range []string{"", "s3cre", "s3cret ", "S3cret"} {
			if h.Matches(wrong) {
				t.Errorf("%s: %q matches the hash of s3cret", name, wrong)
			}
		}
	}
}

// Hashes other tools wrote: the argon2 reference CLI
// (echo -n password | argon2 somesalt -id -t 2 -m 10 -p 1 -e) and
// htpasswd -nbB alice wonderland.
func TestForeignHashes(t *testing.T) {
	for _, c := range []struct{ hash, pw string }{
		{"$argon2id$v=19$m=1024,t=2,p=1$c29tZXNhbHQ$7FfsnA6vUe7qLpL/3Kqc3uR48ZJyFbUVt7jWZlf0Htk", "password"},
		{"$2y$05$eXHizk4ZyJf3MZI1FDpGNea5J8HlpHjgbO3bfYnCSVrB0U31Sw.yS", "wonderland"},
	} {
		h, err := Parse(c.hash)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.hash, err)
		}
		if !h.Matches(c.pw) || h.Matches(c.pw+"x") {
			t.Errorf("%s: matches %q: %v, matches a wrong password: %v", c.hash, c.pw, h.Matches(c.pw), h.Matches(c.pw+"x"))
		}
	}
}

// TestHtpasswdBcrypt runs Debian's htpasswd (apache2-utils) for a fresh
// bcrypt line, at its default cost and at -C 12.
func TestHtpasswdBcrypt(t *testing.T) {
	if _, err := exec.LookPath("htpasswd"); err != nil {
		testenv.SkipOrFail(t, "htpasswd not installed (apt-get install apache2-utils)")
	}
	for _, args := range [][]string{{"-nbB"}, {"-nbB", "-C", "12"}} {
		out, err := exec.Command("htpasswd", append(args, "carol", "correct horse")...).Output()
		if err != nil {
			t.Fatalf("htpasswd %v: %v", args, err)
		}
		user, hash, _ := strings.Cut(strings.TrimSpace(string(out)), ":")
		h, err := Parse(hash)
		if err != nil || user != "carol" {
			t.Fatalf("htpasswd %v wrote %q: user %q, %v", args, out, user, err)
		}
		if !h.Matches("correct horse") || h.Matches("correct horse ") {
			t.Errorf("htpasswd %v: %s does not match exactly its password", args, hash)
		}
	}
}

func TestParseRefusesOutOfBounds(t *testing.T) {
	pb := strings.Split(must(New("x", MinIterations)), "$")
	for _, c := range []struct{ in, want string }{
		{"$2y$15$eXHizk4ZyJf3MZI1FDpGNea5J8HlpHjgbO3bfYnCSVrB0U31Sw.yS", "cost 15 above 14"},
		{"$2y$05$tooshort", "bcrypt"},
		{"$argon2id$v=19$m=262144,t=2,p=1$c29tZXNhbHQ$7FfsnA6vUe7qLpL/3Kqc3uR48ZJyFbUVt7jWZlf0Htk", "m=262144"},
		{"$argon2id$v=19$m=1024,t=99,p=1$c29tZXNhbHQ$7FfsnA6vUe7qLpL/3Kqc3uR48ZJyFbUVt7jWZlf0Htk", "t=99"},
		{"$argon2id$v=16$m=1024,t=2,p=1$c29tZXNhbHQ$7FfsnA6vUe7qLpL/3Kqc3uR48ZJyFbUVt7jWZlf0Htk", "v=19"},
		{"$argon2i$v=19$m=1024,t=2,p=1$c29tZXNhbHQ$7FfsnA6vUe7qLpL/3Kqc3uR48ZJyFbUVt7jWZlf0Htk", "not a password hash"},
		{strings.Join([]string{pb[0], "20000000", pb[2], pb[3]}, "$"), "iterations"},
		{"$apr1$abc$def", "htpasswd -B"},
	} {
		if _, err := Parse(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error about %s", c.in, err, c.want)
		}
	}
}

// bcrypt ignores bytes past the 72nd: a longer password must not get in
// on its first 72 bytes.
func TestBcryptRefusesLongPasswords(t *testing.T) {
	long := strings.Repeat("a", BcryptMaxPassword)
	h, err := Parse(must(NewBcrypt(long, MinBcryptCost)))
	if err != nil {
		t.Fatal(err)
	}
	if !h.Matches(long) || h.Matches(long+"b") {
		t.Errorf("72-byte password matches: %v; with a 73rd byte: %v (want true, false)", h.Matches(long), h.Matches(long+"b"))
	}
	if _, err := NewBcrypt(long+"b", MinBcryptCost); err == nil {
		t.Error("NewBcrypt hashed a 73-byte password")
	}
}

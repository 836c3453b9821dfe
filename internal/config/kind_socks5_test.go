// Tests of the socks5 section: hashed users parse, inline or from an htpasswd users_file, and every mistake is reported on its line.

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splicer/splicer/proxy/socks5/passwd"
)

func TestSOCKS5SectionParses(t *testing.T) {
	hash, err := passwd.New("pw", passwd.MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, lines(
		"listeners:",
		"  - name: s",
		"    listen: 10.99.1.1:1080",
		"    proxy: socks5",
		"    socks5:",
		"      handshake_timeout: 3s",
		"      users:",
		"        - {name: alice, password_hash: '"+hash+"'}",
	))
	s := cfg.Listeners[0].SOCKS5
	if s == nil || len(s.Users) != 1 || s.Users[0].Name != "alice" || s.Users[0].PasswordHash != hash || s.HandshakeTimeout.Std().String() != "3s" {
		t.Errorf("socks5 section = %+v", s)
	}
	// No authentication must be asked for: without users and without
	// auth: none the file is refused.
	if cfg := mustParse(t, lines("listeners:", "  - {name: s, listen: ':1080', proxy: socks5, socks5: {auth: none}}")); cfg.Listeners[0].SOCKS5.Auth != "none" {
		t.Errorf("socks5 auth none = %+v", cfg.Listeners[0].SOCKS5)
	}
	errs := parseErrors(t, lines("listeners:", "  - {name: s, listen: ':1080', proxy: socks5}"))
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, "auth: none") {
		t.Errorf("socks5 without users or auth none: %v, want one error asking for auth: none", errs)
	}
}

func TestSOCKS5SectionErrors(t *testing.T) {
	hash, _ := passwd.New("pw", passwd.MinIterations)
	errs := parseErrors(t, lines(
		"listeners:",
		"  - name: s",
		"    listen: 10.99.1.1:1080",
		"    proxy: socks5",
		"    upstream: ['10.99.2.2:80']",
		"    socks5:",
		"      handshake_timeout: -1s",
		"      users:",
		"        - {name: alice, password_hash: 'hunter2'}",
		"        - {name: alice, password_hash: '"+hash+"'}",
		"        - {name: '', password_hash: ''}",
	))
	want := []struct {
		line       int
		path, text string
	}{
		{5, "listeners[0].upstream", "connects where each client asks"},
		{7, "listeners[0].socks5.handshake_timeout", ""},
		{9, "listeners[0].socks5.users[0].password_hash", "not a password hash"},
		{10, "listeners[0].socks5.users[1].name", `duplicate user "alice"`},
		{11, "listeners[0].socks5.users[2].name", "needs a name"},
		{11, "listeners[0].socks5.users[2].password_hash", "hash-password"},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs)
	}
	for i, w := range want {
		if e := errs[i]; e.Line != w.line || e.Path != w.path || !strings.Contains(e.Msg, w.text) {
			t.Errorf("error %d = %v, want line %d, %s, containing %q", i, e, w.line, w.path, w.text)
		}
	}
}

// socks5UsersFile writes an htpasswd file named name in dir.
func socks5UsersFile(tb testing.TB, dir, name string, ls ...string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), lines(ls...), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// users_file is taken from the configuration file's directory, read
// when the configuration is, and each mistake in it is reported with its
// line in the file.
func TestSOCKS5UsersFile(t *testing.T) {
	dir := t.TempDir()
	bcrypt, _ := passwd.NewBcrypt("pw", passwd.MinBcryptCost)
	pbkdf2, _ := passwd.New("pw", passwd.MinIterations)
	socks5UsersFile(t, dir, "users", "# who may connect", "alice:"+bcrypt, "", "bob:"+pbkdf2)
	listener := func(section string) []byte {
		return lines("listeners:", "  - {name: s, listen: ':1080', proxy: socks5, socks5: "+section+"}")
	}
	cfg, err := Parse(filepath.Join(dir, "splicer.yaml"), listener("{users_file: users}"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Listeners[0].SOCKS5
	if s.UsersFile != filepath.Join(dir, "users") || !s.HasUsers() {
		t.Errorf("users_file = %q, HasUsers %v; want %s/users, true", s.UsersFile, s.HasUsers(), dir)
	}
	users, err := ReadUsersFile(s.UsersFile)
	if err != nil || len(users) != 2 || users[0] != (SOCKS5User{"alice", bcrypt}) || users[1] != (SOCKS5User{"bob", pbkdf2}) {
		t.Errorf("ReadUsersFile = %+v, %v", users, err)
	}

	socks5UsersFile(t, dir, "bad", "alice:"+bcrypt, "carol:hunter2", "alice:"+pbkdf2)
	socks5UsersFile(t, dir, "dup", "alice:"+bcrypt, "alice:"+pbkdf2)
	socks5UsersFile(t, dir, "empty", "# nobody yet")
	for _, c := range []struct{ section, want string }{
		{"{users_file: missing}", "no such file"},
		{"{users_file: bad}", "bad:2: user \"carol\": not a password hash"},
		{"{users_file: dup}", "dup:2: user \"alice\" again (first on line 1)"},
		{"{users_file: empty}", "no users in it"},
		{"{users_file: users, users: [{name: dave, password_hash: '" + pbkdf2 + "'}]}", "keep one"},
		{"{users_file: users, auth: none}", "auth none with users"},
	} {
		_, err := Parse(filepath.Join(dir, "splicer.yaml"), listener(c.section))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("socks5: %s: %v, want an error containing %q", c.section, err, c.want)
		}
	}
}

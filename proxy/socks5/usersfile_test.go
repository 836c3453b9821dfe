// Users from an htpasswd users_file: bcrypt, argon2id and PBKDF2 users log in through a real listener, wrong passwords reach nothing, and a reload applies a changed file or, when it cannot read it, is refused.

package socks5_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/proxy/socks5"
	"github.com/splicer/splicer/proxy/socks5/passwd"
)

// writeUsers writes an htpasswd file of user:hash lines to path.
func writeUsers(tb testing.TB, path string, ls ...string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(ls, "\n")+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// hashed returns a hash, failing tb if making it failed.
func hashed(tb testing.TB) func(string, error) string {
	return func(s string, err error) string {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}
}

// usersFileListener is a socks5 listener reading its users from path.
func usersFileListener(tb testing.TB, path string) config.Listener {
	tb.Helper()
	lc := socksListener(tb)
	lc.SOCKS5.Auth, lc.SOCKS5.UsersFile = "", path
	return lc
}

// tryLogin reports whether user/pass logs in and, if so, tunnels to addr.
func tryLogin(tb testing.TB, f *forwarder.Forwarder, addr, user, pass string) bool {
	tb.Helper()
	c := dial(tb, f)
	if m := greet(tb, c, 0x02); m != 0x02 {
		tb.Fatalf("method = %#x, want 0x02 (username/password)", m)
	}
	if st := login(tb, c, user, pass); st != 0 {
		closedWithoutData(tb, c)
		return false
	}
	if rep, _ := connectTo(tb, c, addr); rep != socks5.RepSucceeded {
		tb.Fatalf("%s logged in, then reply %#x", user, rep)
	}
	echoes(tb, c, []byte("hello from "+user))
	return true
}

func TestUsersFile(t *testing.T) {
	o := startEcho(t, "tcp", "127.0.0.1:0", nil)
	path := filepath.Join(t.TempDir(), "users")
	htpasswdB := "$2y$05$eXHizk4ZyJf3MZI1FDpGNea5J8HlpHjgbO3bfYnCSVrB0U31Sw.yS" // htpasswd -nbB alice wonderland
	writeUsers(t, path,
		"alice:"+htpasswdB,
		"bob:"+hashed(t)(passwd.NewArgon2id("builder", passwd.Argon2Params{Memory: 64, Time: 1, Threads: 1})),
		"carol:"+hashed(t)(passwd.New("pbkdf2 still works", passwd.MinIterations)),
	)
	lc := usersFileListener(t, path)
	f := fwdtest.Start(t, lc)

	for _, u := range [][2]string{{"alice", "wonderland"}, {"bob", "builder"}, {"carol", "pbkdf2 still works"}} {
		if !tryLogin(t, f, o.addr, u[0], u[1]) {
			t.Errorf("%s with the right password: refused", u[0])
		}
	}
	before := o.accepted.Load()
	for _, u := range [][2]string{{"alice", "builder"}, {"bob", "Builder"}, {"carol", ""}, {"mallory", "wonderland"}} {
		if tryLogin(t, f, o.addr, u[0], u[1]) {
			t.Errorf("%s/%s: logged in", u[0], u[1])
		}
	}
	if n := o.accepted.Load() - before; n != 0 {
		t.Errorf("the origin saw %d connections from failed logins, want 0", n)
	}

	t.Run("reload applies a changed file", func(t *testing.T) {
		writeUsers(t, path, "bob:"+hashed(t)(passwd.NewBcrypt("new password", passwd.MinBcryptCost)))
		if err := reload(t, f, lc); err != nil {
			t.Fatalf("reload: %v", err)
		}
		if !tryLogin(t, f, o.addr, "bob", "new password") {
			t.Error("bob's new password refused after the reload")
		}
		before := o.accepted.Load()
		if tryLogin(t, f, o.addr, "bob", "builder") || tryLogin(t, f, o.addr, "alice", "wonderland") {
			t.Error("bob's old password, or alice (removed), still logs in after the reload")
		}
		if n := o.accepted.Load() - before; n != 0 {
			t.Errorf("the origin saw %d connections from refused logins, want 0", n)
		}
	})
	t.Run("reload refused when the file cannot be read", func(t *testing.T) {
		os.Remove(path)
		err := reload(t, f, lc)
		if err == nil || !strings.Contains(err.Error(), "users_file") || !strings.Contains(err.Error(), path) {
			t.Fatalf("reload without the users file: %v, want an error naming users_file and %s", err, path)
		}
		if !tryLogin(t, f, o.addr, "bob", "new password") {
			t.Error("after a refused reload, the users in use are gone")
		}
	})
}

// reload reloads f with listeners as its whole configuration.
func reload(tb testing.TB, f *forwarder.Forwarder, listeners ...config.Listener) error {
	tb.Helper()
	cfg := config.Default()
	cfg.Listeners = listeners
	_, err := f.Reload(&cfg)
	return err
}

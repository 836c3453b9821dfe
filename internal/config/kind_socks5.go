// The socks5 section: RFC 1929 users with hashed passwords, inline or in an htpasswd file.

package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CheckPasswordHash, when set, says what is wrong with a socks5 user's
// password_hash. The socks5 proxy sets it (the hash format is its own), so
// that this package imports no proxy; unset, hashes are not checked here
// and the proxy refuses a bad one when it starts.
var CheckPasswordHash func(hash string) error

// DefaultSOCKS5HandshakeTimeout bounds a SOCKS5 handshake when the
// configuration does not.
const DefaultSOCKS5HandshakeTimeout = 10 * time.Second

// SOCKS5 configures proxy socks5.
type SOCKS5 struct {
	// Users, when set, require RFC 1929 username/password authentication;
	// without users the proxy accepts clients offering "no authentication".
	Users []SOCKS5User `yaml:"users"`
	// UsersFile names an htpasswd file of the users instead (user:hash
	// lines; a relative path is taken from the configuration file's
	// directory): a Kubernetes Secret or a file htpasswd -B maintains.
	// It is read at start and on every reload; a reload that cannot
	// read it is refused. Users or UsersFile, not both: one place says
	// who may connect.
	UsersFile string `yaml:"users_file"`
	// HandshakeTimeout bounds the client's greeting, authentication and
	// request, so a silent client cannot hold a pair open; 0 (left out)
	// means DefaultSOCKS5HandshakeTimeout.
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
	// Auth is "none" for a listener that lets anyone use it without
	// credentials, which must be said explicitly; with users it is
	// "password" (the default).
	Auth string `yaml:"auth"`
}

// SOCKS5User is one RFC 1929 user; the password is stored hashed.
type SOCKS5User struct {
	Name string `yaml:"name"`
	// PasswordHash is a bcrypt ($2y$...), argon2id ($argon2id$...) or
	// pbkdf2-sha256$... hash, as printed by `splicer hash-password`.
	PasswordHash string `yaml:"password_hash"`
}

// HasUsers reports whether s asks clients for a user name and password,
// from users or users_file.
func (s *SOCKS5) HasUsers() bool {
	return s != nil && (len(s.Users) > 0 || s.UsersFile != "")
}

// ReadUsersFile reads an htpasswd file: one user:hash a line, blank lines
// and lines starting with # ignored. Each hash is checked as an inline
// password_hash is; an error names the file and line.
func ReadUsersFile(path string) ([]SOCKS5User, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var users []SOCKS5User
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		u, err := usersFileLine(line, seen)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		seen[u.Name] = n
		users = append(users, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s: no users in it (user:hash lines, as htpasswd -B writes)", path)
	}
	return users, nil
}

// usersFileLine parses one user:hash line.
func usersFileLine(line string, seen map[string]int) (SOCKS5User, error) {
	name, hash, ok := strings.Cut(line, ":")
	switch {
	case !ok || hash == "":
		return SOCKS5User{}, fmt.Errorf("want user:hash")
	case name == "":
		return SOCKS5User{}, fmt.Errorf("a user needs a name")
	case len(name) > 255:
		return SOCKS5User{}, fmt.Errorf("a user name is at most 255 bytes (RFC 1929)")
	case seen[name] > 0:
		return SOCKS5User{}, fmt.Errorf("user %q again (first on line %d)", name, seen[name])
	}
	if err := checkHash(hash); err != nil {
		return SOCKS5User{}, fmt.Errorf("user %q: %w", name, err)
	}
	return SOCKS5User{Name: name, PasswordHash: hash}, nil
}

// resolveSOCKS5Paths takes users_file's relative path from dir, the
// configuration file's directory.
func (c *Config) resolveSOCKS5Paths(dir string) {
	for i := range c.Listeners {
		if s := c.Listeners[i].SOCKS5; s != nil && s.UsersFile != "" && !filepath.IsAbs(s.UsersFile) {
			s.UsersFile = filepath.Join(dir, s.UsersFile)
		}
	}
}

func (v *validator) socks5(p string, l *Listener) {
	if len(l.Upstream) > 0 {
		v.errorf(p+".upstream", "proxy socks5 connects where each client asks; remove upstream")
	}
	if !l.SOCKS5.HasUsers() {
		if l.SOCKS5 == nil || l.SOCKS5.Auth != "none" {
			v.errorf(p+".socks5", "socks5 without users lets anyone who reaches %s connect anywhere allowed: add users, or set socks5: {auth: none} to mean it", l.Listen)
		}
		if l.SOCKS5 == nil {
			return
		}
	}
	switch l.SOCKS5.Auth {
	case "", "none", "password":
	default:
		v.errorf(p+".socks5.auth", "unknown value %q (allowed: password, none)", l.SOCKS5.Auth)
	}
	if l.SOCKS5.Auth == "none" && l.SOCKS5.HasUsers() {
		v.errorf(p+".socks5.auth", "auth none with users: remove one or the other")
	}
	if f := l.SOCKS5.UsersFile; f != "" {
		if len(l.SOCKS5.Users) > 0 {
			v.errorf(p+".socks5.users_file", "users and users_file: keep one, so that one place says who may connect")
		} else if _, err := ReadUsersFile(f); err != nil {
			v.errorf(p+".socks5.users_file", "%v", err)
		}
	}
	t := l.SOCKS5.HandshakeTimeout
	v.positiveOrLeftOut(p+".socks5.handshake_timeout", int64(t), t.String(), DefaultSOCKS5HandshakeTimeout)
	seen := map[string]bool{}
	for i, u := range l.SOCKS5.Users {
		up := p + ".socks5.users[" + itoa(i) + "]"
		switch {
		case u.Name == "":
			v.errorf(up+".name", "a user needs a name")
		case len(u.Name) > 255:
			v.errorf(up+".name", "a user name is at most 255 bytes (RFC 1929)")
		case seen[u.Name]:
			v.errorf(up+".name", "duplicate user %q", u.Name)
		}
		seen[u.Name] = true
		if u.PasswordHash == "" {
			v.errorf(up+".password_hash", "a user needs a password_hash (make one with `splicer hash-password`)")
		} else if err := checkHash(u.PasswordHash); err != nil {
			v.errorf(up+".password_hash", "%v", err)
		}
	}
}

func checkHash(hash string) error {
	if CheckPasswordHash == nil {
		return nil
	}
	return CheckPasswordHash(hash)
}

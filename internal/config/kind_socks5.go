// The socks5 section: RFC 1929 users with hashed passwords.

package config

import "time"

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
	// PasswordHash is pbkdf2-sha256$iterations$salt$key, as printed by
	// `splicer hash-password`.
	PasswordHash string `yaml:"password_hash"`
}

func (v *validator) socks5(p string, l *Listener) {
	if len(l.Upstream) > 0 {
		v.errorf(p+".upstream", "proxy socks5 connects where each client asks; remove upstream")
	}
	if l.SOCKS5 == nil || len(l.SOCKS5.Users) == 0 {
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
	if l.SOCKS5.Auth == "none" && len(l.SOCKS5.Users) > 0 {
		v.errorf(p+".socks5.auth", "auth none with users: remove one or the other")
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

// The socks5 section: RFC 1929 users with hashed passwords.

package config

import "github.com/splicer/splicer/proxy/socks5/passwd"

// SOCKS5 configures proxy socks5.
type SOCKS5 struct {
	// Users, when set, require RFC 1929 username/password authentication;
	// without users the proxy accepts clients offering "no authentication".
	Users []SOCKS5User `yaml:"users"`
	// HandshakeTimeout bounds the client's greeting, authentication and
	// request, so a silent client cannot hold a pair open; 0 means 10s.
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
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
	if l.SOCKS5 == nil {
		return
	}
	v.notNegative(p+".socks5.handshake_timeout", l.SOCKS5.HandshakeTimeout)
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
		} else if _, err := passwd.Parse(u.PasswordHash); err != nil {
			v.errorf(up+".password_hash", "%v", err)
		}
	}
}

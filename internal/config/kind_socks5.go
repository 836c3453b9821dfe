// The socks5 section: RFC 1929 users with hashed passwords.
package config

// SOCKS5 configures proxy socks5.
type SOCKS5 struct {
	// Users, when set, require RFC 1929 username/password authentication.
	Users []SOCKS5User `yaml:"users"`
}

// SOCKS5User is one RFC 1929 user; the password is stored hashed.
type SOCKS5User struct {
	Name         string `yaml:"name"`
	PasswordHash string `yaml:"password_hash"`
}

func (v *validator) socks5(p string, l *Listener) {
	if l.SOCKS5 == nil {
		return
	}
	for i, u := range l.SOCKS5.Users {
		up := p + ".socks5.users[" + itoa(i) + "]"
		if u.Name == "" {
			v.errorf(up+".name", "a user needs a name")
		}
		if u.PasswordHash == "" {
			v.errorf(up+".password_hash", "a user needs a password_hash")
		}
	}
}

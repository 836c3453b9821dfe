// Package passwd checks the passwords of socks5 users against stored hashes: bcrypt, argon2id and PBKDF2-SHA256, compared in constant time.
//
// A hash is one string, so a configuration file or an htpasswd file can
// hold it:
//
//	$2y$10$<salt and hash>                          bcrypt (htpasswd -B, NewBcrypt)
//	$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>     argon2id, PHC string format (NewArgon2id)
//	pbkdf2-sha256$<iterations>$<salt>$<key>          PBKDF2-SHA256 (New)
//
// Make one with `splicer hash-password` (bcrypt unless told otherwise). A
// Verifier checks a user's password and costs the same for a user it does
// not know as for a wrong password, so timing does not tell which user
// names exist.
package passwd

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

var b64 = base64.RawStdEncoding

// Hash is a parsed password hash of any scheme this package reads.
type Hash interface {
	// Matches reports whether password is the one hashed, in time that
	// does not depend on how much of it is right.
	Matches(password string) bool
	// String is the hash as stored.
	String() string
	// work estimates the nanoseconds of CPU one Matches takes, to give
	// unknown users a decoy as dear as the dearest known one.
	work() float64
	// decoy returns a hash of the same scheme and cost that no password
	// matches.
	decoy() Hash
}

// Parse reads a hash of any supported scheme; the error says what is wrong
// with it.
func Parse(s string) (Hash, error) {
	switch {
	case isBcrypt(s):
		return parseBcrypt(s)
	case strings.HasPrefix(s, argon2Prefix):
		return parseArgon2id(s)
	case strings.HasPrefix(s, Scheme+"$"):
		return parsePBKDF2(s)
	case strings.HasPrefix(s, "$apr1$"), strings.HasPrefix(s, "{SHA}"), strings.HasPrefix(s, "$1$"),
		strings.HasPrefix(s, "$5$"), strings.HasPrefix(s, "$6$"):
		return nil, fmt.Errorf("%s... is a hash this proxy does not read: make a bcrypt one (htpasswd -B, or `splicer hash-password`)", s[:min(len(s), 6)])
	}
	return nil, fmt.Errorf("not a password hash: want bcrypt ($2y$...), argon2id ($argon2id$...) or %s$... (make one with `splicer hash-password`)", Scheme)
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

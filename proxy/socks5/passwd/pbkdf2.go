// PBKDF2-SHA256 hashes, the format of the first releases: still read, and still made on request.

package passwd

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Scheme is the first field of a PBKDF2 hash.
const Scheme = "pbkdf2-sha256"

// DefaultIterations is current guidance for PBKDF2-HMAC-SHA256 (OWASP,
// 600,000): the configurations of the first releases carry 100,000.
const DefaultIterations = 600_000

// MinIterations refuses hashes so cheap that they protect nothing;
// MaxIterations refuses hashes so dear that a few logins take every
// check slot for seconds.
const (
	MinIterations = 1_000
	MaxIterations = 10_000_000
)

const (
	saltLen = 16
	keyLen  = sha256.Size
)

// PBKDF2 is a parsed pbkdf2-sha256$<iterations>$<salt>$<key> hash (salt and
// key in unpadded standard base64).
type PBKDF2 struct {
	Iterations int
	Salt, Key  []byte
}

// New hashes password with PBKDF2-SHA256, a fresh random salt and the given
// iterations (0 means DefaultIterations). Bcrypt is the default of
// `splicer hash-password`; PBKDF2 is kept for FIPS-minded sites and for
// tests that want a cheap hash.
func New(password string, iterations int) (string, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return "", fmt.Errorf("iterations %d outside %d..%d (the minimum protects, the maximum keeps logins from taking seconds)", iterations, MinIterations, MaxIterations)
	}
	salt := make([]byte, saltLen)
	rand.Read(salt)
	key, err := pbkdf2.Key(sha256.New, password, salt, iterations, keyLen)
	if err != nil {
		return "", err
	}
	return PBKDF2{Iterations: iterations, Salt: salt, Key: key}.String(), nil
}

// String formats h as the configuration stores it.
func (h PBKDF2) String() string {
	return fmt.Sprintf("%s$%d$%s$%s", Scheme, h.Iterations, b64.EncodeToString(h.Salt), b64.EncodeToString(h.Key))
}

// parsePBKDF2 reads a hash made by New; the error says what is wrong with it.
func parsePBKDF2(s string) (PBKDF2, error) {
	f := strings.Split(s, "$")
	if len(f) != 4 || f[0] != Scheme {
		return PBKDF2{}, fmt.Errorf("not a %s hash: want %s$iterations$salt$key", Scheme, Scheme)
	}
	it, err := strconv.Atoi(f[1])
	if err != nil || it < MinIterations || it > MaxIterations {
		return PBKDF2{}, fmt.Errorf("iterations %q: want a number from %d to %d", f[1], MinIterations, MaxIterations)
	}
	salt, err := b64.DecodeString(f[2])
	if err != nil || len(salt) < 8 {
		return PBKDF2{}, errors.New("salt: want at least 8 bytes in unpadded standard base64")
	}
	key, err := b64.DecodeString(f[3])
	if err != nil || len(key) != keyLen {
		return PBKDF2{}, fmt.Errorf("key: want %d bytes in unpadded standard base64", keyLen)
	}
	return PBKDF2{Iterations: it, Salt: salt, Key: key}, nil
}

// Matches reports whether password hashes to h, comparing in constant time.
func (h PBKDF2) Matches(password string) bool {
	key, err := pbkdf2.Key(sha256.New, password, h.Salt, h.Iterations, len(h.Key))
	return err == nil && subtle.ConstantTimeCompare(key, h.Key) == 1
}

// work: about 300ns of CPU per iteration (two SHA-256 blocks).
func (h PBKDF2) work() float64 { return float64(h.Iterations) * 300 }

// decoy is a hash as dear as h that no password matches.
func (h PBKDF2) decoy() Hash {
	return PBKDF2{Iterations: h.Iterations, Salt: random(saltLen), Key: random(len(h.Key))}
}

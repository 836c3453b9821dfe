// Bcrypt hashes ($2a$, $2b$, $2y$: htpasswd -B, most web frameworks), through golang.org/x/crypto/bcrypt.

package passwd

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Bcrypt costs: hashes are made at DefaultBcryptCost; a stored hash must
// lie in MinBcryptCost..MaxBcryptCost. The minimum is bcrypt's own (htpasswd
// -B writes 5 unless told -C); the maximum keeps one login under about a
// second of CPU, so that a mistaken cost cannot hold the check slots.
const (
	DefaultBcryptCost = bcrypt.DefaultCost
	MinBcryptCost     = bcrypt.MinCost
	MaxBcryptCost     = 14
)

// BcryptMaxPassword is the longest password bcrypt reads: it ignores the
// bytes past it, so a longer password is refused rather than matched on its
// first 72 bytes.
const BcryptMaxPassword = 72

// Bcrypt is a parsed bcrypt hash, kept as the string the library reads.
type Bcrypt struct {
	hash []byte
	cost int
}

// NewBcrypt hashes password with bcrypt at cost (0 means DefaultBcryptCost).
func NewBcrypt(password string, cost int) (string, error) {
	if cost == 0 {
		cost = DefaultBcryptCost
	}
	if cost < MinBcryptCost || cost > MaxBcryptCost {
		return "", fmt.Errorf("bcrypt cost %d outside %d..%d", cost, MinBcryptCost, MaxBcryptCost)
	}
	if len(password) > BcryptMaxPassword {
		return "", fmt.Errorf("bcrypt reads at most %d bytes of a password: use argon2id for a longer one", BcryptMaxPassword)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	return string(h), err
}

// isBcrypt reports whether s claims to be a bcrypt hash.
func isBcrypt(s string) bool {
	return strings.HasPrefix(s, "$2a$") || strings.HasPrefix(s, "$2b$") || strings.HasPrefix(s, "$2y$")
}

func parseBcrypt(s string) (Bcrypt, error) {
	cost, err := bcrypt.Cost([]byte(s))
	if err != nil || len(s) != 60 {
		return Bcrypt{}, errors.New("bcrypt: want $2y$cost$ and 53 characters of salt and hash")
	}
	if cost > MaxBcryptCost {
		return Bcrypt{}, fmt.Errorf("bcrypt cost %d above %d: each login would take seconds of CPU", cost, MaxBcryptCost)
	}
	return Bcrypt{hash: []byte(s), cost: cost}, nil
}

// Matches reports whether password is h's; the library compares in
// constant time.
func (h Bcrypt) Matches(password string) bool {
	if len(password) > BcryptMaxPassword {
		return false
	}
	return bcrypt.CompareHashAndPassword(h.hash, []byte(password)) == nil
}

func (h Bcrypt) String() string { return string(h.hash) }

// work: about 50µs of CPU per 2^cost round (cost 10 takes some 50ms).
func (h Bcrypt) work() float64 { return float64(uint64(1)<<h.cost) * 50_000 }

// decoy is a bcrypt hash at h's cost of a random password nobody knows.
func (h Bcrypt) decoy() Hash {
	pw := make([]byte, 32)
	rand.Read(pw)
	s, err := bcrypt.GenerateFromPassword(pw, h.cost)
	if err != nil {
		panic(err) // only for a cost out of range, which parseBcrypt refused
	}
	return Bcrypt{hash: s, cost: h.cost}
}

// Argon2id hashes in the PHC string format ($argon2id$v=19$m=...,t=...,p=...$salt$hash), through golang.org/x/crypto/argon2.

package passwd

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2Params are an argon2id hash's costs: Memory in KiB, Time passes,
// Threads lanes.
type Argon2Params struct {
	Memory  uint32
	Time    uint32
	Threads uint8
}

// DefaultArgon2 is OWASP's first recommendation for argon2id (19 MiB, two
// passes, one lane): dear for an attacker's GPU, light enough to pay per
// login on a busy proxy.
var DefaultArgon2 = Argon2Params{Memory: 19 * 1024, Time: 2, Threads: 1}

// Bounds of a stored argon2id hash: the memory bound times the check slots
// (one per CPU) is what concurrent logins can take.
const (
	MaxArgon2Memory  = 128 * 1024 // KiB
	MaxArgon2Time    = 16
	MaxArgon2Threads = 16
)

const argon2Prefix = "$argon2id$"

// Argon2id is a parsed argon2id hash.
type Argon2id struct {
	Argon2Params
	Salt, Key []byte
}

// NewArgon2id hashes password with argon2id, a fresh random salt and p
// (the zero value means DefaultArgon2).
func NewArgon2id(password string, p Argon2Params) (string, error) {
	if p == (Argon2Params{}) {
		p = DefaultArgon2
	}
	if err := p.check(); err != nil {
		return "", err
	}
	salt := random(saltLen)
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, keyLen)
	return Argon2id{Argon2Params: p, Salt: salt, Key: key}.String(), nil
}

func (p Argon2Params) check() error {
	switch {
	case p.Threads < 1 || p.Threads > MaxArgon2Threads:
		return fmt.Errorf("argon2id p=%d: want 1 to %d", p.Threads, MaxArgon2Threads)
	case p.Time < 1 || p.Time > MaxArgon2Time:
		return fmt.Errorf("argon2id t=%d: want 1 to %d", p.Time, MaxArgon2Time)
	case p.Memory < 8*uint32(p.Threads) || p.Memory > MaxArgon2Memory:
		return fmt.Errorf("argon2id m=%d: want %d to %d KiB", p.Memory, 8*uint32(p.Threads), MaxArgon2Memory)
	}
	return nil
}

// String formats h in the PHC string format.
func (h Argon2id) String() string {
	return fmt.Sprintf("%sv=%d$m=%d,t=%d,p=%d$%s$%s", argon2Prefix, argon2.Version, h.Memory, h.Time, h.Threads,
		b64.EncodeToString(h.Salt), b64.EncodeToString(h.Key))
}

func parseArgon2id(s string) (Argon2id, error) {
	f := strings.Split(strings.TrimPrefix(s, argon2Prefix), "$")
	if !strings.HasPrefix(s, argon2Prefix) || len(f) != 4 {
		return Argon2id{}, errors.New("argon2id: want $argon2id$v=19$m=KiB,t=passes,p=lanes$salt$hash")
	}
	var v int
	if _, err := fmt.Sscanf(f[0], "v=%d", &v); err != nil || v != argon2.Version {
		return Argon2id{}, fmt.Errorf("argon2id %s: want v=%d (version 1.3)", f[0], argon2.Version)
	}
	var h Argon2id
	if n, err := fmt.Sscanf(f[1], "m=%d,t=%d,p=%d", &h.Memory, &h.Time, &h.Threads); err != nil || n != 3 {
		return Argon2id{}, fmt.Errorf("argon2id parameters %q: want m=KiB,t=passes,p=lanes", f[1])
	}
	if err := h.check(); err != nil {
		return Argon2id{}, err
	}
	var err error
	if h.Salt, err = b64.DecodeString(f[2]); err != nil || len(h.Salt) < 8 {
		return Argon2id{}, errors.New("argon2id salt: want at least 8 bytes in unpadded standard base64")
	}
	if h.Key, err = b64.DecodeString(f[3]); err != nil || len(h.Key) < 16 || len(h.Key) > 64 {
		return Argon2id{}, errors.New("argon2id hash: want 16 to 64 bytes in unpadded standard base64")
	}
	return h, nil
}

// Matches reports whether password hashes to h, comparing in constant time.
func (h Argon2id) Matches(password string) bool {
	key := argon2.IDKey([]byte(password), h.Salt, h.Time, h.Memory, h.Threads, uint32(len(h.Key)))
	return subtle.ConstantTimeCompare(key, h.Key) == 1
}

// work: about 1µs of CPU per KiB block and pass.
func (h Argon2id) work() float64 { return float64(h.Memory) * float64(h.Time) * 1000 }

func (h Argon2id) decoy() Hash {
	return Argon2id{Argon2Params: h.Argon2Params, Salt: random(len(h.Salt)), Key: random(len(h.Key))}
}

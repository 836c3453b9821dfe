// Package passwd hashes and checks the passwords of socks5 users: salted PBKDF2-SHA256, compared in constant time.
//
// A hash is one string, so a configuration file can hold it:
//
//	pbkdf2-sha256$<iterations>$<salt, base64 raw std>$<key, base64 raw std>
//
// Make one with `splicer hash-password`. A Verifier checks a user's password
// and costs the same for a user it does not know as for a wrong password, so
// timing does not tell which user names exist.
package passwd

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// Scheme is the first field of every hash this package makes.
const Scheme = "pbkdf2-sha256"

// DefaultIterations is slow enough that a stolen configuration does not give
// passwords away cheaply, and fast enough (tens of milliseconds) to pay on
// every SOCKS connection.
const DefaultIterations = 100_000

// MinIterations refuses hashes so cheap that they protect nothing.
const MinIterations = 1_000

const (
	saltLen = 16
	keyLen  = sha256.Size
)

var b64 = base64.RawStdEncoding

// Hash is a parsed password hash.
type Hash struct {
	Iterations int
	Salt, Key  []byte
}

// New hashes password with a fresh random salt and the given iterations (0
// means DefaultIterations).
func New(password string, iterations int) (string, error) {
	if iterations == 0 {
		iterations = DefaultIterations
	}
	if iterations < MinIterations {
		return "", fmt.Errorf("iterations %d below the minimum %d", iterations, MinIterations)
	}
	salt := make([]byte, saltLen)
	rand.Read(salt)
	key, err := pbkdf2.Key(sha256.New, password, salt, iterations, keyLen)
	if err != nil {
		return "", err
	}
	return Hash{Iterations: iterations, Salt: salt, Key: key}.String(), nil
}

// String formats h as the configuration stores it.
func (h Hash) String() string {
	return fmt.Sprintf("%s$%d$%s$%s", Scheme, h.Iterations, b64.EncodeToString(h.Salt), b64.EncodeToString(h.Key))
}

// Parse reads a hash made by New; the error says what is wrong with it.
func Parse(s string) (Hash, error) {
	f := strings.Split(s, "$")
	if len(f) != 4 || f[0] != Scheme {
		return Hash{}, fmt.Errorf("not a password hash: want %s$iterations$salt$key (make one with `splicer hash-password`)", Scheme)
	}
	it, err := strconv.Atoi(f[1])
	if err != nil || it < MinIterations {
		return Hash{}, fmt.Errorf("iterations %q: want a number of at least %d", f[1], MinIterations)
	}
	salt, err := b64.DecodeString(f[2])
	if err != nil || len(salt) < 8 {
		return Hash{}, errors.New("salt: want at least 8 bytes in unpadded standard base64")
	}
	key, err := b64.DecodeString(f[3])
	if err != nil || len(key) != keyLen {
		return Hash{}, fmt.Errorf("key: want %d bytes in unpadded standard base64", keyLen)
	}
	return Hash{Iterations: it, Salt: salt, Key: key}, nil
}

// Matches reports whether password hashes to h, comparing in constant time.
func (h Hash) Matches(password string) bool {
	key, err := pbkdf2.Key(sha256.New, password, h.Salt, h.Iterations, len(h.Key))
	return err == nil && subtle.ConstantTimeCompare(key, h.Key) == 1
}

// Verifier checks user names and passwords against a fixed set of users.
type Verifier struct {
	users map[string]Hash
	// decoy is checked for unknown users so that they cost as much as a
	// known user with a wrong password.
	decoy Hash
	// slots bounds concurrent checks: each costs tens of milliseconds of
	// CPU, and a flood of handshakes must not take every core.
	slots chan struct{}
}

// checkSlots is how many password checks run at once: one per CPU.
var checkSlots = runtime.NumCPU()

// NewVerifier parses every user's hash (name -> hash).
func NewVerifier(users map[string]string) (*Verifier, error) {
	v := &Verifier{users: make(map[string]Hash, len(users)), slots: make(chan struct{}, checkSlots)}
	maxIt := DefaultIterations
	for name, s := range users {
		h, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
		v.users[name] = h
		maxIt = max(maxIt, h.Iterations)
	}
	// The decoy is as slow as the slowest user, so no user name is
	// distinguishable by being faster to reject.
	decoy, err := New("", maxIt)
	if err != nil {
		return nil, err
	}
	v.decoy, _ = Parse(decoy)
	return v, nil
}

// Check reports whether user exists and password is theirs.
func (v *Verifier) Check(user, password string) bool {
	ok, _ := v.CheckContext(context.Background(), user, password)
	return ok
}

// CheckContext is Check waiting at most until ctx ends for one of the
// bounded check slots; ctx's error when it could not check in time.
func (v *Verifier) CheckContext(ctx context.Context, user, password string) (bool, error) {
	select {
	case v.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-v.slots }()
	return v.check(user, password), nil
}

func (v *Verifier) check(user, password string) bool {
	h, known := v.users[user]
	if !known {
		h = v.decoy
	}
	ok := h.Matches(password)
	return known && ok
}

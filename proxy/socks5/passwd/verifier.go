// Verifier: a user set's password checks, bounded in number at once, with a decoy for unknown users and a short memory of recent successes.

package passwd

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Verifier checks user names and passwords against a fixed set of users.
type Verifier struct {
	users map[string]Hash
	// decoy is checked for unknown users so that they cost as much as a
	// known user with a wrong password.
	decoy Hash
	// slots bounds concurrent checks: each costs tens of milliseconds of
	// CPU (and, for argon2id, its memory), and a flood of handshakes must
	// not take every core.
	slots chan struct{}
	// recent lets a user who logged in moments ago in without a slow
	// check (and without a slot, so a flood of wrong passwords does not
	// lock them out).
	recent *recentLogins
}

// checkSlots is how many password checks run at once: one per CPU.
var checkSlots = runtime.NumCPU()

// RecentLoginTTL is how long a successful login is remembered; a client
// opening a connection per request pays the slow hash once in this time.
const RecentLoginTTL = 2 * time.Minute

// NewVerifier parses every user's hash (name -> hash).
func NewVerifier(users map[string]string) (*Verifier, error) {
	v := &Verifier{users: make(map[string]Hash, len(users)), slots: make(chan struct{}, checkSlots),
		recent: newRecentLogins(RecentLoginTTL)}
	for name, s := range users {
		h, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
		v.users[name] = h
		// The decoy is as slow as the slowest user, so no user name is
		// distinguishable by being faster to reject.
		if v.decoy == nil || h.work() > v.decoy.work() {
			v.decoy = h
		}
	}
	if v.decoy == nil {
		v.decoy = Bcrypt{cost: DefaultBcryptCost}
	}
	v.decoy = v.decoy.decoy()
	return v, nil
}

// Len is the number of users.
func (v *Verifier) Len() int { return len(v.users) }

// Check reports whether user exists and password is theirs.
func (v *Verifier) Check(user, password string) bool {
	ok, _ := v.CheckContext(context.Background(), user, password)
	return ok
}

// CheckContext is Check waiting at most until ctx ends for one of the
// bounded check slots; ctx's error when it could not check in time. A
// user and password that succeeded within RecentLoginTTL need no slot.
func (v *Verifier) CheckContext(ctx context.Context, user, password string) (bool, error) {
	h, known := v.users[user]
	if known && v.recent.has(user, h, password) {
		return true, nil
	}
	select {
	case v.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-v.slots }()
	if !known {
		v.decoy.Matches(password)
		return false, nil
	}
	if !h.Matches(password) {
		return false, nil
	}
	v.recent.add(user, h, password)
	return true, nil
}

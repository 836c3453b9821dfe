// Recent logins: a keyed digest of each user, hash and password that matched, kept for a short time so that a client's next connections skip the slow hash.

package passwd

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// maxRecent bounds the memory of recent logins; past it, new successes
// are not remembered until old ones expire.
const maxRecent = 4096

// recentLogins remembers successful checks. Entries are HMAC-SHA256 under
// a key made for this process: not a fast hash of the password that a
// memory dump could brute-force without the key, and not a map key an
// attacker can aim at. The digest covers the stored hash, so a changed
// password (a reload) misses; only successes are stored, so a wrong
// password always pays the slow hash.
type recentLogins struct {
	key []byte
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex // guards expires
	expires map[[sha256.Size]byte]time.Time
}

func newRecentLogins(ttl time.Duration) *recentLogins {
	return &recentLogins{key: random(32), ttl: ttl, now: time.Now, expires: map[[sha256.Size]byte]time.Time{}}
}

func (r *recentLogins) digest(user string, h Hash, password string) [sha256.Size]byte {
	m := hmac.New(sha256.New, r.key)
	for _, s := range []string{user, h.String(), password} {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		m.Write([]byte(s))
	}
	var d [sha256.Size]byte
	m.Sum(d[:0])
	return d
}

// has reports whether user logged in with password against h within the TTL.
func (r *recentLogins) has(user string, h Hash, password string) bool {
	d := r.digest(user, h, password)
	r.mu.Lock()
	defer r.mu.Unlock()
	exp, ok := r.expires[d]
	if ok && r.now().After(exp) {
		delete(r.expires, d)
		return false
	}
	return ok
}

// add remembers a successful login.
func (r *recentLogins) add(user string, h Hash, password string) {
	d := r.digest(user, h, password)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.expires) >= maxRecent {
		for k, exp := range r.expires {
			if now.After(exp) {
				delete(r.expires, k)
			}
		}
		if len(r.expires) >= maxRecent {
			return
		}
	}
	r.expires[d] = now.Add(r.ttl)
}

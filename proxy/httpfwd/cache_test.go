// Tests of the cache: which responses are cacheable for how long, LRU eviction within the byte bound, reservations for captures in flight, expiry.

package httpfwd

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestLifetime(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	for _, tc := range []struct {
		name      string
		reqHeader http.Header
		status    int
		length    int64
		header    http.Header
		want      time.Duration
	}{
		{"max-age", nil, 200, 10, http.Header{"Cache-Control": {"max-age=60"}}, time.Minute},
		{"s-maxage wins", nil, 200, 10, http.Header{"Cache-Control": {"max-age=60, s-maxage=120"}}, 2 * time.Minute},
		{"expires", nil, 200, 10, http.Header{"Date": {date}, "Expires": {now.Add(time.Hour).Format(http.TimeFormat)}}, time.Hour},
		{"expired", nil, 200, 10, http.Header{"Date": {date}, "Expires": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{"no lifetime", nil, 200, 10, http.Header{"Cache-Control": {"public"}}, 0},
		{"no-store", nil, 200, 10, http.Header{"Cache-Control": {"max-age=60, no-store"}}, 0},
		{"private", nil, 200, 10, http.Header{"Cache-Control": {"private, max-age=60"}}, 0},
		{"not 200", nil, 404, 10, http.Header{"Cache-Control": {"max-age=60"}}, 0},
		{"unknown length", nil, 200, -1, http.Header{"Cache-Control": {"max-age=60"}}, 0},
		{"vary", nil, 200, 10, http.Header{"Cache-Control": {"max-age=60"}, "Vary": {"Accept"}}, 0},
		{"authorization", http.Header{"Authorization": {"x"}}, 200, 10, http.Header{"Cache-Control": {"max-age=60"}}, 0},
		{"authorization, public", http.Header{"Authorization": {"x"}}, 200, 10, http.Header{"Cache-Control": {"public, max-age=60"}}, time.Minute},
	} {
		req := &http.Request{Method: http.MethodGet, Header: tc.reqHeader}
		if req.Header == nil {
			req.Header = http.Header{}
		}
		resp := &http.Response{StatusCode: tc.status, ContentLength: tc.length, Header: tc.header}
		if got := lifetime(req, resp, now); got != tc.want {
			t.Errorf("%s: lifetime %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRequestCacheable(t *testing.T) {
	for _, tc := range []struct {
		method string
		header http.Header
		want   bool
	}{
		{http.MethodGet, http.Header{}, true},
		{http.MethodPost, http.Header{}, false},
		{http.MethodGet, http.Header{"Cache-Control": {"no-cache"}}, false},
		{http.MethodGet, http.Header{"Pragma": {"no-cache"}}, false},
	} {
		if got := requestCacheable(&http.Request{Method: tc.method, Header: tc.header}); got != tc.want {
			t.Errorf("%s %v: cacheable %v, want %v", tc.method, tc.header, got, tc.want)
		}
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	// Room for three entries of this size, not four.
	sz := (&entry{key: "a", header: http.Header{}, body: make([]byte, 299)}).size()
	c := NewCache(3*sz + sz/2)
	now := time.Now()
	put := func(key string) {
		c.put(&entry{key: key, header: http.Header{}, body: []byte(strings.Repeat("x", 300-len(key))), stored: now, expires: now.Add(time.Hour)})
	}
	put("a")
	put("b")
	put("c")
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	put("d") // a fourth: evicts b, the least recently used
	if _, ok := c.get("b"); ok {
		t.Error("b survived; it was the least recently used")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	if c.Bytes() != 3*sz || c.Entries() != 3 {
		t.Errorf("cache holds %d bytes in %d entries, want %d in 3", c.Bytes(), c.Entries(), 3*sz)
	}
}

func TestCacheDropsExpiredEntries(t *testing.T) {
	c := NewCache(1000)
	now := time.Now()
	c.now = func() time.Time { return now }
	c.put(&entry{key: "k", header: http.Header{}, body: []byte("v"), stored: now, expires: now.Add(time.Minute)})
	if _, ok := c.get("k"); !ok {
		t.Fatal("fresh entry missing")
	}
	now = now.Add(time.Minute)
	if _, ok := c.get("k"); ok {
		t.Error("expired entry served")
	}
	if c.Bytes() != 0 {
		t.Errorf("expired entry still takes %d bytes", c.Bytes())
	}
}

// Reservations for captures in flight count against the bound: past it a
// capture is refused, entries are evicted to make room, and a released
// reservation is room again.
func TestCacheReservesCapturesInFlight(t *testing.T) {
	c := NewCache(8000) // entries of at most 1000 bytes
	now := time.Now()
	// An entry of ~920 bytes with its overhead.
	c.put(&entry{key: "old", header: http.Header{}, body: make([]byte, 400), stored: now, expires: now.Add(time.Hour)})
	if c.reserve(1001) {
		t.Error("a capture past the largest entry was reserved")
	}
	for i := range 7 {
		if !c.reserve(1000) {
			t.Fatalf("reservation %d of 7 refused", i+1)
		}
	}
	if c.Entries() != 1 {
		t.Errorf("%d entries with 7000 of 8000 bytes reserved, want the one that fits", c.Entries())
	}
	if !c.reserve(1000) {
		t.Fatal("the eighth reservation refused: the entry should have made room")
	}
	if c.Entries() != 0 {
		t.Errorf("%d entries beside reservations filling the bound", c.Entries())
	}
	if c.reserve(1) {
		t.Error("a reservation past the bound succeeded")
	}
	c.release(1000)
	if !c.reserve(1000) {
		t.Error("a released reservation's room was not given again")
	}
}

// The response cache: which exchanges may be cached, and an LRU bounded in bytes, bodies being captured included.

package httpfwd

import (
	"container/list"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cache holds fresh responses in memory, least recently used evicted first
// once the bytes held pass the bound. Bodies being captured count against
// the bound too (reserve). It is safe for concurrent use.
type Cache struct {
	max int64

	mu    sync.Mutex
	bytes int64
	// inflight are the bytes reserved for bodies being captured.
	inflight int64
	lru      *list.List // of *entry, most recently used first
	byKey    map[string]*list.Element
	now      func() time.Time
}

// entry is one cached response: status 200, its end-to-end headers and body.
type entry struct {
	key     string
	header  http.Header
	body    []byte
	stored  time.Time
	expires time.Time
}

// Per-entry heap overhead the byte bound counts besides the strings and
// the body: the entry, its list element, its map slot and the header map
// (measured with runtime.MemStats over 100,000 tiny entries: ~600 bytes).
const (
	entryOverhead  = 512
	headerOverhead = 64 // per header field: its map slot and slice
)

// size is what the entry costs the heap, approximately: a cache of tiny
// entries must be bounded by what they cost, not by their bodies alone.
func (e *entry) size() int64 {
	n := int64(entryOverhead + 2*len(e.key) + len(e.body))
	for k, vs := range e.header {
		n += int64(len(k)) + headerOverhead
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}

// Entries is how many responses the cache holds.
func (c *Cache) Entries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// NewCache returns a cache holding at most maxBytes.
func NewCache(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, lru: list.New(), byKey: map[string]*list.Element{}, now: time.Now}
}

// MaxEntry is the largest body the cache takes: an eighth of the cache, so
// that one response cannot flush everything else.
func (c *Cache) MaxEntry() int64 { return c.max / 8 }

// Bytes is what the cache holds now.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// get returns the fresh entry for key, if any, and marks it used.
func (c *Cache) get(key string) (*entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if !c.now().Before(e.expires) {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e, true
}

// reserve counts n bytes of a body about to be captured against the
// bound, evicting the least recently used entries to make room, and
// reports false when the captures already in flight leave no room. The
// capture holds its whole declared length from the start, before any
// byte arrives: without the reservation, clients asking for bodies an
// origin declares and never sends would make the proxy hold any amount.
// Each reservation that succeeds is given back with release.
func (c *Cache) reserve(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.MaxEntry() || c.inflight+n > c.max {
		return false
	}
	c.inflight += n
	c.evict()
	return true
}

// release gives back a reservation, once its capture has ended.
func (c *Cache) release(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight -= n
}

// put stores e, replacing an entry with the same key, and evicts the least
// recently used entries until the cache is within its bound.
func (c *Cache) put(e *entry) {
	if e.size() > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[e.key]; ok {
		c.remove(el)
	}
	c.byKey[e.key] = c.lru.PushFront(e)
	c.bytes += e.size()
	c.evict()
}

// evict removes the least recently used entries until what the cache
// holds and what is reserved fit the bound.
func (c *Cache) evict() {
	for c.bytes+c.inflight > c.max && c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
}

func (c *Cache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*entry)
	delete(c.byKey, e.key)
	c.bytes -= e.size()
}

// cacheKey names a request's response in the cache.
func cacheKey(req *http.Request) string { return req.URL.String() }

// requestCacheable says whether the response to req may come from, or go
// into, the cache: a GET without a body whose client does not ask to bypass
// caches.
func requestCacheable(req *http.Request) bool {
	if req.Method != http.MethodGet || req.ContentLength > 0 || len(req.TransferEncoding) > 0 {
		return false
	}
	cc := directives(req.Header)
	_, noStore := cc["no-store"]
	_, noCache := cc["no-cache"]
	return !noStore && !noCache && !strings.EqualFold(req.Header.Get("Pragma"), "no-cache")
}

// lifetime says how long resp to req stays fresh in a shared cache (RFC
// 9111 sections 3 and 4.2.1), or 0 when it must not be stored: only a 200
// with a known length, no no-store, private or no-cache, no Vary or
// Set-Cookie, and an explicit lifetime from s-maxage, max-age or Expires.
// A request with Authorization is cached only if the response says public
// or s-maxage.
func lifetime(req *http.Request, resp *http.Response, now time.Time) time.Duration {
	if resp.StatusCode != http.StatusOK || resp.ContentLength < 0 ||
		resp.Header.Get("Vary") != "" || resp.Header.Get("Set-Cookie") != "" {
		return 0
	}
	cc := directives(resp.Header)
	for _, d := range []string{"no-store", "private", "no-cache"} {
		if _, ok := cc[d]; ok {
			return 0
		}
	}
	_, public := cc["public"]
	_, shared := cc["s-maxage"]
	if req.Header.Get("Authorization") != "" && !public && !shared {
		return 0
	}
	for _, d := range []string{"s-maxage", "max-age"} {
		if v, ok := cc[d]; ok {
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil || secs <= 0 {
				return 0
			}
			return time.Duration(secs) * time.Second
		}
	}
	return untilExpires(resp.Header, now)
}

// untilExpires is the lifetime the Expires header gives, measured against
// the response's Date when it has one (so the two clocks need not agree).
func untilExpires(h http.Header, now time.Time) time.Duration {
	exp, err := http.ParseTime(h.Get("Expires"))
	if err != nil {
		return 0
	}
	base := now
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		base = date
	}
	return max(exp.Sub(base), 0)
}

// directives parses Cache-Control into lower-case names and their values.
func directives(h http.Header) map[string]string {
	out := map[string]string{}
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			if name != "" {
				out[strings.ToLower(name)] = strings.Trim(val, `"`)
			}
		}
	}
	return out
}

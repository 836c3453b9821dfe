// X-Request-ID: the client's passed on when sane, else one made up, so that the back end's logs and the access log name a request alike.

package httpcore

import (
	"math/rand/v2"
	"net/http"
	"unsafe"
)

// requestIDField is X-Request-ID's canonical name.
const requestIDField = "X-Request-Id"

// requestIDBytes is the randomness of an ID the proxy makes: 16 bytes,
// written as 32 hex digits.
const requestIDBytes = 16

// maxRequestID bounds an ID the proxy passes on: 128 bytes holds a UUID,
// an ULID, a W3C trace ID or a chain of them, and not a stored payload.
const maxRequestID = 128

// ValidRequestID reports whether a client's X-Request-ID is sane enough to
// pass on and log: 1 to maxRequestID bytes of visible ASCII (no space, no
// control byte), which no log line or header can be split by.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// SetRequestID gives req the X-Request-ID it goes upstream with, and
// returns it: the client's when it sent one valid value (ValidRequestID),
// else one the proxy makes, random. The made ID is written in c's memory,
// valid until the next request's: no allocation per request.
func (c *Conn) SetRequestID(req *http.Request) string {
	if v := req.Header[requestIDField]; len(v) == 1 && ValidRequestID(v[0]) {
		return v[0]
	}
	const hex = "0123456789abcdef"
	b := &c.reqID
	for i := 0; i < requestIDBytes; i += 8 {
		r := rand.Uint64() // the runtime's per-thread ChaCha8: fast, unpredictable enough for an ID
		for j := 0; j < 8; j++ {
			x := byte(r >> (8 * j))
			b[2*(i+j)], b[2*(i+j)+1] = hex[x>>4], hex[x&0xf]
		}
	}
	id := unsafe.String(&b[0], len(b))
	c.reqIDValue[0] = id
	req.Header[requestIDField] = c.reqIDValue[:1:1]
	return id
}

// What the filter blocks: request paths (before any byte goes upstream) and response media types (the response replaced by a 403).

package filter

import (
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
)

// blockedType returns the pattern that blocks resp's media type, if any.
func (c *conn) blockedType(resp *message) (string, bool) {
	if len(c.p.BlockContentTypes) == 0 {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(resp.header.Get("Content-Type"))
	if err != nil {
		return "", false
	}
	return matchAny(c.p.BlockContentTypes, strings.ToLower(mt))
}

// blockResponse drops a response the filter blocks: the upstream is closed
// (its body is never read) and the client gets a 403. The client
// connection stays usable only if its request body was complete.
func (c *conn) blockResponse(resp *message, pat string, bodyDone chan error) (bool, error) {
	c.s.Log().Info("filter blocked response", "content_type", resp.header.Get("Content-Type"), "pattern", pat)
	c.closeUpstream()
	bodyErr := c.waitBody(bodyDone)
	msg := "blocked by filter: content type matches " + pat
	if bodyErr != nil {
		c.refuse(http.StatusForbidden, msg)
		return true, nil
	}
	if _, err := io.WriteString(c.client, errorResponse(http.StatusForbidden, msg, false)); err != nil {
		return true, err
	}
	return false, nil
}

// blockedPath returns the pattern that blocks the request path p. The path
// is cleaned first, so /x/../admin and //admin are /admin; a pattern
// without a slash matches the last element, as in .gitignore (*.exe).
func blockedPath(patterns []string, p string, ignoreCase, stripParams bool) (string, bool) {
	if stripParams {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	p = path.Clean("/" + p)
	if ignoreCase {
		p = strings.ToLower(p)
	}
	for _, pat := range patterns {
		if ignoreCase {
			pat = strings.ToLower(pat)
		}
		subject := p
		if !strings.Contains(pat, "/") {
			subject = path.Base(p)
		}
		if ok, _ := path.Match(pat, subject); ok {
			return pat, true
		}
	}
	return "", false
}

// matchAny returns the first pattern that matches s.
func matchAny(patterns []string, s string) (string, bool) {
	for _, pat := range patterns {
		if ok, _ := path.Match(pat, s); ok {
			return pat, true
		}
	}
	return "", false
}

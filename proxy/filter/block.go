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

// blockedPath returns the pattern that blocks the request path p (decoded,
// free of dot segments: targetPath). Every reading of p that some origin
// makes is matched, so that none reaches a blocked resource by another
// spelling: p with repeated slashes merged, also without ";params" (Tomcat,
// Jetty), also with each segment's trailing dots and spaces gone (Windows),
// slashes merged again, each in lower case (case-insensitive file systems). The patterns are
// lowered too: matching ignores case.
func blockedPath(patterns []string, p string) (string, bool) {
	for _, subject := range readings(p) {
		for _, pat := range patterns {
			if matchPath(strings.ToLower(pat), subject) {
				return pat, true
			}
		}
	}
	return "", false
}

// readings are the paths origins may take p for, lower case.
func readings(p string) []string {
	merged := strings.ToLower(mergeSlashes(p))
	segs := strings.Split(merged, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	bare := strings.Join(segs, "/")
	for i, s := range segs {
		segs[i] = strings.TrimRight(s, ". ")
	}
	return []string{merged, mergeSlashes(bare), mergeSlashes(strings.Join(segs, "/"))}
}

// mergeSlashes turns each run of slashes in p into one, and makes p
// absolute.
func mergeSlashes(p string) string {
	b := make([]byte, 1, len(p)+1)
	b[0] = '/'
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && b[len(b)-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

// matchPath reports whether the path.Match pattern pat matches path p:
//   - a pattern without "/" matches any one segment (*.exe blocks
//     /a/x.exe and /x.exe/info, which PATH_INFO serves as x.exe);
//   - a pattern ending in "/*" matches the whole subtree below its
//     directory (/admin/* blocks /admin/, /admin/a and /admin/a/b, not
//     /admin);
//   - any other matches p, with or without a trailing slash.
func matchPath(pat, p string) bool {
	if !strings.Contains(pat, "/") {
		for _, seg := range strings.Split(p, "/") {
			if ok, _ := path.Match(pat, seg); ok && seg != "" {
				return true
			}
		}
		return false
	}
	if ok, _ := path.Match(pat, p); ok {
		return true
	}
	if strings.HasSuffix(pat, "/*") {
		for i := 1; i < len(p); i++ {
			if p[i] != '/' {
				continue
			}
			if ok, _ := path.Match(pat, p[:i]); ok {
				return true
			}
		}
		return false
	}
	if t := strings.TrimSuffix(p, "/"); t != p && t != "" {
		ok, _ := path.Match(pat, t)
		return ok
	}
	return false
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

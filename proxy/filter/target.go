// The request target's path as the filter matches it, and the targets it refuses because an origin could read them as another path.

package filter

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// targetPath returns the decoded path of a request target (origin or
// absolute form) that the filter matches block_paths against, or why the
// target is refused with 400.
//
// The target is forwarded as it arrived, so the path the filter decides on
// must be the one every origin reads from it. Whatever origins read in
// more than one way is refused rather than guessed at:
//   - an encoded "/" (%2f) or "\" (%5c), and "\" itself: some origins take
//     them as separators (IIS, Windows, Tomcat with ALLOW_ENCODED_SLASH),
//     others as part of a name;
//   - an encoded control character (%00 to %1f, %7f): NUL ends the path for
//     some origins;
//   - "#": no request target has a fragment (RFC 9112 3.2);
//   - dot segments (".", "..", "..." or any segment of only dots and
//     spaces, also with ";params" and after decoding, as %2e%2e): resolved
//     by some origins, taken literally by others;
//   - an escape that decodes to another escape (%252f): an origin that
//     decodes twice reads a different path;
//   - a decoded path that is not UTF-8 (overlong forms such as %c0%af,
//     which old decoders read as "/").
func targetPath(target string) (string, error) {
	raw := rawPath(target)
	if err := checkRawPath(raw); err != nil {
		return "", err
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "", badRequest("request target %q: %v", short(target), err)
	}
	if !utf8.ValidString(p) {
		return "", badRequest("request path %q is not UTF-8 once decoded", short(target))
	}
	if hasEscape(p) {
		return "", badRequest("request path %q is percent-encoded twice", short(target))
	}
	for _, seg := range strings.Split(p, "/") {
		if dotSegment(seg) {
			return "", badRequest("request path %q has a dot segment", short(target))
		}
	}
	return p, nil
}

// rawPath is the path of a request target as sent: the target up to its
// query, without the scheme and authority of an absolute form.
func rawPath(target string) string {
	if !strings.HasPrefix(target, "/") {
		if _, rest, ok := strings.Cut(target, "://"); ok {
			if i := strings.IndexAny(rest, "/?"); i >= 0 && rest[i] == '/' {
				target = rest[i:]
			} else {
				target = "/"
			}
		}
	}
	p, _, _ := strings.Cut(target, "?")
	return p
}

// checkRawPath refuses separators and control characters an origin could
// read otherwise, as sent or percent-encoded.
func checkRawPath(raw string) error {
	for i := 0; i < len(raw); i++ {
		if b := raw[i]; ambiguous(b) || b == '#' || b == ' ' {
			return badRequest("request path %q has %q", short(raw), rune(b))
		}
		if raw[i] != '%' || i+2 >= len(raw) {
			continue
		}
		if b, ok := unhex(raw[i+1], raw[i+2]); ok && (b == '/' || ambiguous(b)) {
			return badRequest("request path %q has an encoded %q", short(raw), rune(b))
		}
	}
	return nil
}

// ambiguous reports whether b, in a path, is a backslash or a control
// character.
func ambiguous(b byte) bool { return b == '\\' || b < 0x20 || b == 0x7f }

// dotSegment reports whether a path segment, without its ";params", is
// made of dots and spaces only (at least one dot): ".", "..", and the
// forms Windows and Tomcat also read as them ("... ", "..;x").
func dotSegment(seg string) bool {
	seg, _, _ = strings.Cut(seg, ";")
	return strings.Contains(seg, ".") && strings.Trim(seg, ". ") == ""
}

// hasEscape reports whether s holds a percent-escape.
func hasEscape(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if _, ok := unhex(s[i+1], s[i+2]); s[i] == '%' && ok {
			return true
		}
	}
	return false
}

// unhex decodes two hex digits.
func unhex(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// short keeps a target in an error message short.
func short(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

// The filter section: what the filtering proxy blocks.

package config

import "path"

// Filter configures proxy filter: it inspects both directions and is never spliced.
type Filter struct {
	// BlockPaths are request path patterns (path.Match syntax, matched
	// against the cleaned path) answered 403.
	BlockPaths []string `yaml:"block_paths"`
	// BlockContentTypes are response media type patterns (path.Match
	// syntax, e.g. image/* or application/zip) replaced by a 403.
	BlockContentTypes []string `yaml:"block_content_types"`
	// PathIgnoreCase is kept for old files: block_paths always match
	// regardless of case, since a case-insensitive origin reads /ADMIN as
	// /admin and a deny list must over-block, not under-block.
	PathIgnoreCase bool `yaml:"path_ignore_case"`
	// PathStripParams is kept for old files: block_paths are always
	// matched with and without ";params" (Tomcat and Jetty drop them).
	PathStripParams bool `yaml:"path_strip_params"`
}

func (v *validator) filter(p string, l *Listener) {
	if len(l.Upstream) == 0 {
		v.errorf(p+".upstream", "proxy filter needs at least one upstream host:port")
	}
	v.filterHTTP(p+".http", l.HTTP)
	if l.Filter == nil {
		return
	}
	v.patterns(p+".filter.block_paths", l.Filter.BlockPaths)
	v.patterns(p+".filter.block_content_types", l.Filter.BlockContentTypes)
}

// filterIgnores are the http section's keys the filter does not read,
// and the kinds that do.
var filterIgnores = map[string][]string{
	"connect_ports":   {"http-forward"},
	"body_min_rate":   {"http-forward", "http-reverse"},
	"trusted_proxies": {"http-reverse"},
	"cache_bytes":     {"http-forward"},
}

// filterHTTP checks a filter listener's http section as the HTTP kinds'
// (a 0 written for a bound is refused, not read as the default), and
// refuses the keys the filter would ignore.
func (v *validator) filterHTTP(p string, h *HTTP) {
	if h == nil {
		return
	}
	for key, kinds := range filterIgnores {
		if v.written(p + "." + key) {
			v.errorf(p+"."+key, "%s is not used by proxy filter (it is for: %v)", key, kinds)
		}
	}
	read := *h // without the keys refused above, so each is reported once
	read.ConnectPorts, read.TrustedProxies, read.BodyMinRate = nil, nil, DefaultHTTPBodyMinRate
	v.httpSection(p, &read)
}

// patterns checks path.Match patterns, which fail only when matched.
func (v *validator) patterns(p string, pats []string) {
	for i, pat := range pats {
		if pat == "" {
			v.errorf(p+"["+itoa(i)+"]", "empty pattern")
		} else if _, err := path.Match(pat, ""); err != nil {
			v.errorf(p+"["+itoa(i)+"]", "bad pattern %q: %v", pat, err)
		}
	}
}

// The filter section: what the filtering proxy blocks.
package config

// Filter configures proxy filter: it inspects both directions and is never spliced.
type Filter struct {
	// BlockPaths are request path patterns (path.Match syntax) answered 403.
	BlockPaths []string `yaml:"block_paths"`
	// BlockContentTypes are response media types replaced by a 403.
	BlockContentTypes []string `yaml:"block_content_types"`
}

func (v *validator) filter(p string, l *Listener) {
	if l.Filter == nil {
		return
	}
	for i, pat := range l.Filter.BlockPaths {
		if pat == "" {
			v.errorf(p+".filter.block_paths["+itoa(i)+"]", "empty pattern")
		}
	}
}

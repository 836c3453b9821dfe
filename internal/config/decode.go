// A strict decoder from a yaml.Node tree into the config structs, reporting every problem with its position.

package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decoder walks a yaml.Node tree against a Go value by reflection on yaml
// tags. It exists because yaml.v3's KnownFields is not honoured by
// Node.Decode, and because yaml.v3 stops at the first type error while a user
// wants all of them.
type decoder struct {
	errs *errorList
	// nodes maps each decoded key path to its value node, so that validation
	// can point at the offending value.
	nodes map[string]*yaml.Node
	// inside holds the nodes being decoded, because yaml.v3 lets an alias
	// refer to a node that contains it (a: &x [*x]), which would otherwise
	// recurse forever.
	inside map[*yaml.Node]bool
	// merged caches each merge source's expanded pairs: nested merge keys
	// through aliases (a1: {<<: [*a0, *a0, ...]}, a2: {<<: [*a1, *a1, ...]})
	// would otherwise take time exponential in the file's length.
	merged map[*yaml.Node][][2]*yaml.Node
}

func newDecoder(errs *errorList) *decoder {
	return &decoder{errs: errs, nodes: map[string]*yaml.Node{}, inside: map[*yaml.Node]bool{}, merged: map[*yaml.Node][][2]*yaml.Node{}}
}

// enter marks n as being decoded; it returns false, having reported the
// error, if n is already being decoded further up.
func (d *decoder) enter(n *yaml.Node, path string) bool {
	if d.inside[n] {
		d.errs.undecodable(n, path, "an alias here refers to a value that contains it")
		return false
	}
	d.inside[n] = true
	return true
}

func (d *decoder) leave(n *yaml.Node) { delete(d.inside, n) }

// defaulter is implemented by list item types whose items start from
// defaults rather than from the zero value.
type defaulter interface{ setDefaults() }

// liner is implemented by list item types that remember their line.
type liner interface{ setLine(int) }

// shorthand is implemented by mapping types that may also be written as
// one scalar, which fills their main key (a pool's server as "host:port"
// for {address: "host:port"}).
type shorthand interface{ fromScalar(string) }

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decode stores n into the value ptr points to. A null node (`key:` or
// `key: ~`) leaves the value as it was, that is, at its default.
func (d *decoder) decode(n *yaml.Node, ptr any, path string) {
	d.value(n, reflect.ValueOf(ptr).Elem(), path)
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	n = resolveAlias(n)
	d.nodes[path] = n
	if v.Kind() == reflect.Pointer && !isNull(n) {
		// An optional section: allocate it and decode into it, before
		// enter, which would take the same node for a self-reference.
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
		return
	}
	if isNull(n) || !d.enter(n, path) {
		return
	}
	defer d.leave(n)
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.errs.undecodable(n, path, "%v", err)
		}
		return
	}
	if sh, ok := v.Addr().Interface().(shorthand); ok && n.Kind == yaml.ScalarNode {
		sh.fromScalar(n.Value)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String:
		if d.wantScalar(n, path, "a string") {
			v.SetString(n.Value)
		}
	case reflect.Bool:
		d.boolean(n, v, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.integer(n, v, path)
	default:
		// A field type the schema does not support is a programming error
		// that the tests catch, not a user's.
		panic(fmt.Sprintf("config: unsupported field type %s at %s", v.Type(), path))
	}
}

func (d *decoder) wantScalar(n *yaml.Node, path, what string) bool {
	if n.Kind != yaml.ScalarNode {
		d.errs.undecodable(n, path, "expected %s, got %s", what, describe(n))
		return false
	}
	return true
}

func (d *decoder) boolean(n *yaml.Node, v reflect.Value, path string) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		d.errs.undecodable(n, path, "expected true or false, got %s", describe(n))
		return
	}
	v.SetBool(b)
}

func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) {
	var i int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
		d.errs.undecodable(n, path, "expected an integer, got %s", describe(n))
		return
	}
	if v.OverflowInt(i) {
		d.errs.undecodable(n, path, "%d is too large", i)
		return
	}
	v.SetInt(i)
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errs.undecodable(n, path, "expected a list, got %s%s", describe(n), listHint(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		elem := s.Index(i)
		if df, ok := elem.Addr().Interface().(defaulter); ok {
			df.setDefaults()
		}
		if ln, ok := elem.Addr().Interface().(liner); ok {
			ln.setLine(resolveAlias(item).Line)
		}
		d.value(item, elem, path+"["+strconv.Itoa(i)+"]")
	}
	v.Set(s)
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	fields := yamlFields(v.Type())
	if n.Kind != yaml.MappingNode {
		d.errs.undecodable(n, path, "expected a mapping with keys %s, got %s", strings.Join(fields.names, ", "), describe(n))
		return
	}
	for _, kv := range d.pairs(n, path) {
		key, val := kv[0], kv[1]
		idx, ok := fields.index[key.Value]
		if !ok {
			d.errs.atNode(key, joinPath(path, key.Value), "unknown key %q%s", key.Value, suggest(key.Value, fields.names))
			continue
		}
		d.value(val, v.Field(idx), joinPath(path, key.Value))
	}
}

// pairs returns n's key/value pairs with YAML merge keys (`<<: *anchor`)
// expanded: an explicit key wins over a merged one, and an earlier merged
// mapping wins over a later one. It reports keys that are not strings and
// keys given twice explicitly.
func (d *decoder) pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	var explicit, merged [][2]*yaml.Node
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		switch {
		case key.Kind == yaml.ScalarNode && key.ShortTag() == "!!merge":
			merged = append(merged, d.mergeSources(val, path)...)
		case key.Kind != yaml.ScalarNode:
			d.errs.atNode(key, path, "a key must be a plain name, got %s", describe(key))
		case first[key.Value] != nil:
			d.errs.atNode(key, joinPath(path, key.Value), "duplicate key %q (first set on line %d)", key.Value, first[key.Value].Line)
		default:
			first[key.Value] = key
			explicit = append(explicit, [2]*yaml.Node{key, val})
		}
	}
	for _, kv := range merged {
		if first[kv[0].Value] == nil {
			first[kv[0].Value] = kv[0]
			explicit = append(explicit, kv)
		}
	}
	return explicit
}

// mergeSources returns the pairs a merge key's value brings in: one mapping
// or a list of mappings, usually aliases.
func (d *decoder) mergeSources(val *yaml.Node, path string) [][2]*yaml.Node {
	val = resolveAlias(val)
	var sources []*yaml.Node
	switch val.Kind {
	case yaml.MappingNode:
		sources = []*yaml.Node{val}
	case yaml.SequenceNode:
		sources = val.Content
	}
	var out [][2]*yaml.Node
	for _, src := range sources {
		src = resolveAlias(src)
		if src.Kind != yaml.MappingNode {
			d.errs.atNode(src, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(src))
			continue
		}
		out = append(out, d.mergeSource(src, path)...)
	}
	if len(sources) == 0 {
		d.errs.atNode(val, path, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(val))
	}
	return out
}

// listHint shows how a lone scalar would be written as a one-item list, the
// usual slip being `upstream: 10.0.0.1:80` for `upstream: [10.0.0.1:80]`.
func listHint(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || n.Value == "" {
		return ""
	}
	return " (write a list like [" + n.Value + "])"
}

// mergeSource returns the pairs of one mapping named by a merge key.
func (d *decoder) mergeSource(src *yaml.Node, path string) [][2]*yaml.Node {
	if kv, ok := d.merged[src]; ok {
		return kv
	}
	if !d.enter(src, path) {
		return nil
	}
	defer d.leave(src)
	kv := d.pairs(src, path)
	d.merged[src] = kv
	return kv
}

// fieldSet is a struct type's yaml keys.
type fieldSet struct {
	index map[string]int // key -> field index
	names []string       // keys in declaration order, for messages
}

func yamlFields(t reflect.Type) fieldSet {
	fs := fieldSet{index: map[string]int{}}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fs.index[name] = i
		fs.names = append(fs.names, name)
	}
	return fs
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a node holds, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	n = resolveAlias(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
	default:
		return "nothing"
	}
	switch n.ShortTag() {
	case "!!null":
		return "an empty value"
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	}
	return fmt.Sprintf("the string %q", n.Value)
}

// suggest returns a hint for an unknown key: the closest known key if it is
// a likely typo, or else the list of known keys.
func suggest(key string, known []string) string {
	// A typo is at most two edits away, and fewer than half the key, so
	// that "x" does not suggest "ip".
	best, bestDist := "", min(3, (len(key)+1)/2)
	for _, k := range known {
		if dist := editDistance(key, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return " (known keys: " + strings.Join(known, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

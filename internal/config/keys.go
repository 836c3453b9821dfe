// Every key the decoder accepts, enumerated from the Go structs by their yaml tags: the source of the JSON Schema and of docs/configuration.md's test.

package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// key is one key of the file, named by its path from the top:
// "engines.ip.local_ports", "listeners[].http.body_timeout" ("[]"
// stands for every item of a list). Sections are keys too: the decoder
// accepts "listeners[].http" as it accepts the keys inside it.
type key struct {
	path string
	typ  reflect.Type // the field's type, a pointer's element for an optional key
}

// keys returns every key the decoder accepts, in the structs' order, a
// section before the keys inside it. It walks the types as the decoder
// does (yamlFields), so a field added to a struct is a key here at once.
func keys() []key { return appendKeys(nil, reflect.TypeFor[Config](), "") }

func appendKeys(out []key, t reflect.Type, prefix string) []key {
	for _, f := range keyFields(t) {
		path := joinPath(prefix, f.name)
		out = append(out, key{path: path, typ: f.typ})
		if inner, list := sectionOf(f.typ); inner != nil {
			if list {
				path += "[]"
			}
			out = appendKeys(out, inner, path)
		}
	}
	return out
}

// keyField is one yaml-tagged field of a struct.
type keyField struct {
	name  string
	index int
	typ   reflect.Type // pointers removed
}

// keyFields are t's keys in declaration order, as the decoder's
// yamlFields finds them.
func keyFields(t reflect.Type) []keyField {
	fs := yamlFields(t)
	out := make([]keyField, len(fs.names))
	for i, name := range fs.names {
		idx := fs.index[name]
		out[i] = keyField{name: name, index: idx, typ: deref(t.Field(idx).Type)}
	}
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isScalar reports whether the decoder reads t from one scalar through
// its own UnmarshalYAML (Duration, Size, Workers) rather than by its
// fields.
func isScalar(t reflect.Type) bool { return reflect.PointerTo(t).Implements(unmarshalerType) }

// sectionOf returns the struct whose keys t holds: t itself (a mapping),
// or for a list of mappings its item type (list true); nil for a value.
func sectionOf(t reflect.Type) (inner reflect.Type, list bool) {
	if t.Kind() == reflect.Slice {
		t, list = deref(t.Elem()), true
	}
	if t.Kind() != reflect.Struct || isScalar(t) {
		return nil, false
	}
	return t, list
}

var (
	durationType   = reflect.TypeFor[Duration]()
	sizeType       = reflect.TypeFor[Size]()
	workersType    = reflect.TypeFor[Workers]()
	poolServerType = reflect.TypeFor[PoolServer]()
)

// typeName says what a key takes, as docs/configuration.md's type
// column writes it.
func typeName(t reflect.Type) string {
	t = deref(t)
	switch {
	case t == durationType:
		return "duration"
	case t == sizeType:
		return "size"
	case t == workersType:
		return "integer or auto"
	case t == poolServerType:
		return "server"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Struct:
		return "mapping"
	case reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

// keyDefaults maps each key whose default is a fixed value to it: the
// values Default and DefaultListener hold, the http and upstream_pool
// sections' WithDefaults, and the defaults the code applies to a key
// left out. A key missing here has no default, or one that depends on
// other keys (engines.ip.pin_dir, upstream_pool.receive_buffer).
func keyDefaults() map[string]any {
	d := map[string]any{}
	collectDefaults(d, reflect.ValueOf(Default()), "")
	collectDefaults(d, reflect.ValueOf(DefaultListener()), "listeners[]")
	collectDefaults(d, reflect.ValueOf((*HTTP)(nil).WithDefaults()), "listeners[].http")
	collectDefaults(d, reflect.ValueOf((*UpstreamPool)(nil).WithDefaults()), "listeners[].upstream_pool")
	d["workers"] = Workers(0).Count()
	d["listeners[].request_timeout"] = Duration(DefaultRequestTimeout)
	d["listeners[].socks5.handshake_timeout"] = Duration(DefaultSOCKS5HandshakeTimeout)
	fall, rise := HealthCheck{}.Thresholds()
	for _, p := range []string{"listeners[]", "listeners[].pools[]"} {
		d[p+".balance"] = Balances[0]
		d[p+".max_fails"] = DefaultMaxFails
		d[p+".fail_timeout"] = Duration(DefaultFailTimeout)
		d[p+".resolver.interval"] = Duration(DefaultResolveInterval)
		d[p+".health_check.fall"] = fall
		d[p+".health_check.rise"] = rise
	}
	d["listeners[].upstream[].weight"] = DefaultWeight
	d["listeners[].pools[].servers[].weight"] = DefaultWeight
	d["listeners[].pools[].hash_on"] = "client_ip"
	return d
}

// collectDefaults records v's values that differ from their type's zero
// value, by key path; the items of a list have no defaults here.
func collectDefaults(d map[string]any, v reflect.Value, prefix string) {
	for _, f := range keyFields(v.Type()) {
		fv := v.Field(f.index)
		for fv.Kind() == reflect.Pointer && !fv.IsNil() {
			fv = fv.Elem()
		}
		path := joinPath(prefix, f.name)
		switch inner, list := sectionOf(f.typ); {
		case list:
		case inner != nil && fv.Kind() == reflect.Struct:
			collectDefaults(d, fv, path)
		case fv.Kind() != reflect.Pointer && !fv.IsZero():
			d[path] = fv.Interface()
		}
	}
}

// formatDefault writes a default as the file would: 10s, 64KiB, [443].
func formatDefault(v any) string {
	switch x := v.(type) {
	case Duration:
		return shortDuration(x.Std())
	case Size:
		return x.String()
	case []int:
		s := make([]string, len(x))
		for i, n := range x {
			s[i] = strconv.Itoa(n)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// shortDuration is d as Go writes it without its empty trailing units:
// 1h for 1h0m0s, 10m for 10m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// A JSON Schema (draft 2020-12) of the configuration file, built from the same walk of the structs as the decoder's, for editors.

package config

import (
	"encoding/json"
	"reflect"
	"slices"
)

// SchemaID names the draft the schema follows.
const SchemaID = "https://json-schema.org/draft/2020-12/schema"

// Patterns of the two unit-carrying scalars, as ParseDuration and
// ParseSize read them: Go duration syntax (a bare 0 too), and a whole
// number of bytes with an optional binary unit.
const (
	durationPattern = `^\s*(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)\s*$`
	sizePattern     = `^\s*[0-9]+\s*(B|KiB|MiB|GiB)?\s*$`
)

// JSONSchema returns a JSON Schema of the configuration file: every key
// with its type, the defaults the code applies, the fixed sets of
// values of the enumerated keys (engine names as registered when it is
// called) and no key beyond those the decoder accepts. An empty value
// (`key:`) is allowed everywhere: the decoder takes it as the default.
// Rules across keys (a kind's sections, addresses, ranges) are
// `splicer check`'s.
func JSONSchema() ([]byte, error) {
	s := objectSchema(reflect.TypeFor[Config](), "", keyDefaults())
	s["$schema"] = SchemaID
	s["title"] = "splicer configuration"
	s["description"] = "The YAML configuration of splicer run and splicer check; docs/configuration.md describes every key."
	return json.MarshalIndent(s, "", "  ")
}

// schema is one JSON Schema object.
type schema = map[string]any

// enumKeys are the keys whose values are a fixed set, by path.
func enumKeys() map[string][]string {
	return map[string][]string{
		"log.level":                   LogLevels,
		"log.format":                  LogFormats,
		"access_log.format":           AccessLogFormats,
		"listeners[].proxy":           ProxyKinds,
		"listeners[].engine":          EngineNames,
		"listeners[].balance":         Balances,
		"listeners[].pools[].balance": Balances,
		"listeners[].proxy_protocol":  ProxyProtocols,
		"listeners[].socks5.auth":     {"", "none", "password"},
	}
}

// requiredKeys are the keys a mapping must have, by the mapping's path.
var requiredKeys = map[string][]string{
	"":                                 {"listeners"},
	"listeners[]":                      {"name", "listen"},
	"listeners[].pools[]":              {"name", "servers"},
	"listeners[].routes[]":             {"pool"},
	"listeners[].tls_routes[]":         {"pool"},
	"listeners[].socks5.users[]":       {"name", "password_hash"},
	"listeners[].health_check":         {"interval", "timeout"},
	"listeners[].pools[].health_check": {"interval", "timeout"},
}

// objectSchema is the schema of a mapping of type t at path: its keys
// and nothing else, as the decoder refuses an unknown key.
func objectSchema(t reflect.Type, path string, defaults map[string]any) schema {
	props := schema{}
	for _, f := range keyFields(t) {
		props[f.name] = valueSchema(f.typ, joinPath(path, f.name), defaults)
	}
	s := schema{"type": "object", "properties": props, "additionalProperties": false}
	if req := requiredKeys[path]; len(req) > 0 {
		s["required"] = req
	}
	return s
}

// valueSchema is the schema of a key of type t at path, an empty value
// allowed.
func valueSchema(t reflect.Type, path string, defaults map[string]any) schema {
	s := typeSchema(t, path, defaults)
	if values, ok := enumKeys()[path]; ok {
		s["enum"] = slices.Clone(values)
	}
	s = orNull(s)
	if d, ok := defaults[path]; ok {
		s["default"] = jsonDefault(d)
	}
	return s
}

func typeSchema(t reflect.Type, path string, defaults map[string]any) schema {
	switch t {
	case durationType:
		return schema{"anyOf": []any{
			schema{"type": "string", "pattern": durationPattern},
			schema{"const": 0},
		}, "description": "a duration in Go syntax: 500ms, 5s, 1m30s, 1h; 0 bare"}
	case sizeType:
		return schema{"anyOf": []any{
			schema{"type": "integer", "minimum": 0},
			schema{"type": "string", "pattern": sizePattern},
		}, "description": "bytes: a whole number, or with a binary unit: 64KiB, 1MiB (B, KiB, MiB, GiB)"}
	case workersType:
		return schema{"anyOf": []any{
			schema{"type": "integer", "minimum": 1, "maximum": MaxWorkers},
			schema{"const": "auto"},
		}}
	case poolServerType:
		return schema{"anyOf": []any{
			schema{"type": "string", "description": "host:port"},
			objectSchema(t, path, defaults),
		}}
	}
	switch t.Kind() {
	case reflect.String:
		return schema{"type": "string"}
	case reflect.Bool:
		return schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return schema{"type": "integer"}
	case reflect.Struct:
		return objectSchema(t, path, defaults)
	case reflect.Slice:
		return schema{"type": "array", "items": typeSchema(deref(t.Elem()), path+"[]", defaults)}
	}
	panic("config: no schema for " + t.String() + " at " + path)
}

// orNull also allows an empty value: the decoder leaves the key at its
// default.
func orNull(s schema) schema {
	if typ, ok := s["type"].(string); ok {
		s["type"] = []string{typ, "null"}
		if values, ok := s["enum"].([]string); ok {
			enum := make([]any, 0, len(values)+1)
			for _, v := range values {
				enum = append(enum, v)
			}
			s["enum"] = append(enum, nil)
		}
		return s
	}
	return schema{"anyOf": []any{s, schema{"type": "null"}}}
}

// jsonDefault writes a default as the file would: strings for
// durations and sizes with a unit.
func jsonDefault(v any) any {
	switch x := v.(type) {
	case Duration, Size:
		s := formatDefault(x)
		if n, ok := x.(Size); ok && s == itoa(int(n)) {
			return int64(n)
		}
		return s
	}
	return v
}

// Duration and Size: the two unit-carrying scalar types of the configuration.

package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in Go syntax (5s, 1m30s, 250ms). A bare
// 0 is accepted; any other number needs a unit, because "30" could mean
// seconds to one reader and milliseconds to another.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration parses s in Go duration syntax; the error is worded for a
// configuration file rather than for a programmer.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %s (use Go syntax like 500ms, 5s, 1m30s, 1h)", s, durationProblem(err))
	}
	return Duration(v), nil
}

// durationProblem keeps the useful part of a time.ParseDuration error
// ("missing unit", "unknown unit \"sec\"") and drops the repeated input.
func durationProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "time: ")
	if i := strings.Index(msg, " in duration "); i >= 0 {
		return msg[:i]
	}
	return "not a duration"
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration like 5s, got %s", describe(n))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML implements yaml.Marshaler, so a Config written back out parses
// to the same values.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Size is a byte count written as a plain integer (65536) or with a binary
// unit (64KiB, 1MiB). Decimal units (KB, MB) are refused rather than guessed
// at: a buffer size that is silently 2.4% off is worse than an error.
type Size int64

// sizeUnits are the accepted suffixes, largest first so String picks the
// largest exact unit.
var sizeUnits = []struct {
	name  string
	bytes int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// ParseSize parses a byte count with an optional binary unit suffix.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	digits := len(t) - len(strings.TrimLeft(t, "0123456789"))
	if digits == 0 {
		return 0, fmt.Errorf("invalid size %q: expected a whole number of bytes with an optional unit (B, KiB, MiB, GiB), like 65536 or 64KiB", s)
	}
	n, err := strconv.ParseInt(t[:digits], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: number too large", s)
	}
	unit := strings.TrimSpace(t[digits:])
	mult, ok := sizeUnit(unit)
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, KiB, MiB or GiB; 1KiB = 1024 bytes)", s, unit)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("invalid size %q: number too large", s)
	}
	return Size(n * mult), nil
}

func sizeUnit(name string) (int64, bool) {
	if name == "" {
		return 1, true
	}
	for _, u := range sizeUnits {
		if u.name == name {
			return u.bytes, true
		}
	}
	return 0, false
}

// String writes s with the largest unit that divides it exactly, so that it
// parses back to the same value.
func (s Size) String() string {
	for _, u := range sizeUnits {
		if s != 0 && int64(s)%u.bytes == 0 && u.bytes > 1 {
			return strconv.FormatInt(int64(s)/u.bytes, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a size like 65536 or 64KiB, got %s", describe(n))
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

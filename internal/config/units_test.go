// Tests for the Duration and Size scalar types.

package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		err  string
	}{
		{in: "65536", want: 65536},
		{in: "64KiB", want: 64 << 10},
		{in: "64 KiB", want: 64 << 10},
		{in: "1MiB", want: 1 << 20},
		{in: "2GiB", want: 2 << 30},
		{in: "512B", want: 512},
		{in: "0", want: 0},
		{in: "64KB", err: `unknown unit "KB"`},
		{in: "64k", err: `unknown unit "k"`},
		{in: "1.5MiB", err: `unknown unit ".5MiB"`},
		{in: "-1", err: "expected a whole number of bytes"},
		{in: "MiB", err: "expected a whole number of bytes"},
		{in: "", err: "expected a whole number of bytes"},
		{in: "99999999999999999999", err: "too large"},
		{in: "9999999999GiB", err: "too large"},
	} {
		got, err := ParseSize(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
		}
	}
}

func TestSizeStringParsesBack(t *testing.T) {
	for _, s := range []Size{0, 1, 1000, 1024, 65536, 1<<20 + 1, 3 << 30, 1 << 40} {
		str := s.String()
		back, err := ParseSize(str)
		if err != nil || back != s {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", str, back, err, s)
		}
	}
	if got := Size(64 << 10).String(); got != "64KiB" {
		t.Errorf("String() = %q, want 64KiB", got)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "5s", want: 5 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "0", want: 0},
		{in: "30", err: "missing unit"},
		{in: "30sec", err: `unknown unit "sec"`},
		{in: "soon", err: "not a duration"},
		{in: "", err: "not a duration"},
	} {
		got, err := ParseDuration(tc.in)
		switch {
		case tc.err == "" && (err != nil || got.Std() != tc.want):
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseDuration(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
		}
	}
}

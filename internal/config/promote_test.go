// Tests of the promote section: defaults kept per key, both thresholds off, and the checks.

package config

import (
	"testing"
	"time"
)

func TestPromoteKeepsTheDefaultOfEachKeyLeftOut(t *testing.T) {
	cfg := mustParse(t, lines(
		"listeners:",
		"  - {name: a, listen: ':1', upstream: ['h:2'], promote: {after_bytes: 1MiB}}",
		"  - {name: b, listen: ':3', upstream: ['h:2'], promote: {after: 2s}}",
		"  - {name: c, listen: ':4', upstream: ['h:2'], promote: {after_bytes: 0, after: 0s}}",
		"  - {name: d, listen: ':5', upstream: ['h:2']}",
	))
	want := []struct {
		p    Promote
		text string
	}{
		{Promote{AfterBytes: 1 << 20, After: Duration(200 * time.Millisecond)}, "after 1MiB or 200ms"},
		{Promote{AfterBytes: 192 << 10, After: Duration(2 * time.Second)}, "after 192KiB or 2s"},
		{Promote{}, "at once"},
		{DefaultPromote, "after 192KiB or 200ms"},
	}
	for i, w := range want {
		got := cfg.Listeners[i].Promote
		if got != w.p || got.String() != w.text {
			t.Errorf("listener %s: promote = %+v (%s), want %+v (%s)", cfg.Listeners[i].Name, got, got, w.p, w.text)
		}
	}
	if cfg.Listeners[2].Promote.On() || !cfg.Listeners[0].Promote.On() {
		t.Errorf("both thresholds 0 must hand pairs to ip at once, and only they")
	}
}

func TestPromoteErrors(t *testing.T) {
	for _, tc := range []struct {
		name, listener string
		want           []wantErr
	}{
		{"negative time", "engine: auto, promote: {after: -1s}",
			[]wantErr{{2, "listeners[0].promote.after", "must not be negative, got -1s"}}},
		{"a size without a unit it knows", "promote: {after_bytes: 256KB}",
			[]wantErr{{2, "listeners[0].promote.after_bytes", `unknown unit "KB" (use B, KiB, MiB or GiB`}}},
		{"a negative size", "promote: {after_bytes: -1}",
			[]wantErr{{2, "listeners[0].promote.after_bytes", `invalid size "-1"`}}},
		{"a named engine", "engine: pipe, promote: {after_bytes: 1MiB}",
			[]wantErr{{2, "listeners[0].promote", "promote is for engine auto, which starts pairs on copy and moves them to ip; engine pipe starts every pair on pipe"}}},
		{"misspelt key", "promote: {after_byte: 1MiB}",
			[]wantErr{{2, "listeners[0].promote.after_byte", `did you mean "after_bytes"`}}},
		{"not a section", "promote: 1MiB",
			[]wantErr{{2, "listeners[0].promote", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, lines(
				"listeners:",
				"  - {name: a, listen: ':1', upstream: ['h:2'], "+tc.listener+"}",
			)), tc.want)
		})
	}
}

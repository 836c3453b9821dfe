// Failures under a policy: max_fails failed connects within fail_timeout skip a server for fail_timeout, and a connect that works forgets them.

package proxy

import (
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
)

func TestFailuresSkipAServerForFailTimeout(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	policy := config.FailPolicy{MaxFails: 3, Timeout: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		fails []time.Duration // failed connects, from t0
		ok    []bool          // a connect that worked right after the failure of the same index
		down  []time.Duration // times the server must be skipped at
		up    []time.Duration // times it must not
	}{
		{name: "three within the timeout", fails: []time.Duration{0, time.Second, 2 * time.Second},
			down: []time.Duration{2 * time.Second, 11 * time.Second}, up: []time.Duration{12 * time.Second}},
		{name: "three spread wider than the timeout", fails: []time.Duration{0, 6 * time.Second, 12 * time.Second},
			up: []time.Duration{12 * time.Second, 13 * time.Second}},
		{name: "a connect that works in between", fails: []time.Duration{0, time.Second, 2 * time.Second}, ok: []bool{false, true, false},
			up: []time.Duration{2 * time.Second, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Failures
			for i, d := range tc.fails {
				f.Failed(policy, at(d))
				if i < len(tc.ok) && tc.ok[i] {
					f.Succeeded()
				}
			}
			for _, d := range tc.down {
				if !f.Down(at(d)) {
					t.Errorf("not skipped %v after t0", d)
				}
			}
			for _, d := range tc.up {
				if f.Down(at(d)) {
					t.Errorf("skipped %v after t0", d)
				}
			}
		})
	}
}

func TestFailuresNeverSkipWithMaxFailsZero(t *testing.T) {
	var f Failures
	now := time.Now()
	for range 100 {
		if f.Failed(config.FailPolicy{MaxFails: 0, Timeout: time.Hour}, now) {
			t.Fatal("Failed reported the server skipped with max_fails 0")
		}
	}
	if f.Down(now) || f.MayBeDown() {
		t.Error("skipped with max_fails 0")
	}
}

func TestSucceededEndsASkip(t *testing.T) {
	var f Failures
	now := time.Now()
	if !f.Failed(config.FailPolicy{MaxFails: 1, Timeout: time.Hour}, now) {
		t.Fatal("one failed connect with max_fails 1 did not skip the server")
	}
	if !f.Down(now.Add(time.Minute)) {
		t.Fatal("not skipped a minute later")
	}
	f.Succeeded()
	if f.Down(now.Add(time.Minute)) || f.MayBeDown() {
		t.Error("still skipped after a connect that worked")
	}
}

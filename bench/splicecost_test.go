// splice-cost's note for an engine that failed part way: the cells it keeps are the runs before the failure, and the note says so.

package bench

import (
	"errors"
	"testing"
)

func TestFailedInRunSaysWhichCellsRemain(t *testing.T) {
	err := errors.New("upstream dial: cannot assign requested address")
	for _, tc := range []struct {
		run  int
		want string
	}{
		{0, "failed: upstream dial: cannot assign requested address"},
		{2, "failed in run 3, its cells are the 2 before: upstream dial: cannot assign requested address"},
	} {
		if got := failedInRun(tc.run, err); got != tc.want {
			t.Errorf("run index %d: %q, want %q", tc.run, got, tc.want)
		}
	}
}

// Conformance of the pipe engine.

package pipe_test

import (
	"testing"

	"github.com/splicer/splicer/engine/enginetest"
	"github.com/splicer/splicer/engine/pipe"
)

func TestConformance(t *testing.T) {
	e := pipe.New(0)
	t.Cleanup(func() { e.Close() })
	enginetest.Run(t, e)
}

// Conformance of the copy engine.

package copy_test

import (
	"testing"

	copyengine "github.com/splicer/splicer/engine/copy"
	"github.com/splicer/splicer/engine/enginetest"
)

func TestConformance(t *testing.T) { enginetest.Run(t, copyengine.New(0)) }

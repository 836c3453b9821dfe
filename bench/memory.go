// The memory experiment (seed 001 §V-C): bytes per pair held unspliced and spliced.
package bench

import (
	"context"
	"errors"
)

// MaxMemoryPairs is the largest pair count that fits the open-file limit.
const MaxMemoryPairs = 9000

// Memory is filled in below.
func Memory(ctx context.Context, e *Env, s Settings) (*Result, error) {
	return nil, errors.New("not yet")
}

// The splice-cost experiment (seed 001 §V-B3, Fig. 10): time to splice idle pairs, and throughput across a splice under load.
package bench

import (
	"context"
	"errors"
)

// SpliceCost is filled in below.
func SpliceCost(ctx context.Context, e *Env, s Settings) (*Result, error) {
	return nil, errors.New("not yet")
}

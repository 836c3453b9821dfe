// Small helpers shared by the subcommands.

package main

import (
	"context"
)

// canceled returns a context that is already done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Small helpers shared by the subcommands.

package main

import (
	"context"
	"runtime"
)

// canceled returns a context that is already done.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// runtimeCPUs is the number of CPUs this process may use.
func runtimeCPUs() int { return runtime.NumCPU() }

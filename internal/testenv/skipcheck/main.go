// Command skipcheck fails when a verbose test log reports a skip that CI's allow-list does not name.
//
// Usage: skipcheck ALLOW-LIST LOG. .ci/run runs it on the log of make test,
// with .ci/allowed-skips: a test that skips in CI for a reason no one
// wrote down there is a test CI did not run.
package main

import (
	"fmt"
	"os"

	"github.com/splicer/splicer/internal/testenv"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: skipcheck ALLOW-LIST LOG")
		os.Exit(2)
	}
	bad, err := check(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	for _, name := range bad {
		fmt.Printf("skipped, not allowed by %s: %s\n", os.Args[1], name)
	}
	if len(bad) > 0 {
		os.Exit(1)
	}
}

// check returns the skips in the log at logPath that the allow-list at
// allowPath does not name.
func check(allowPath, logPath string) ([]string, error) {
	af, err := os.Open(allowPath)
	if err != nil {
		return nil, err
	}
	defer af.Close()
	allowed, err := testenv.AllowedSkips(af)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", allowPath, err)
	}
	lf, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	return testenv.UnexpectedSkips(lf, allowed)
}

// splicer demo and splicer bench: run the splicer-bench binary installed beside this one, which holds the lab, load generators and plots so the daemon does not link them.

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// benchCommand is splicer SUB, which runs splicer-bench SUB with the
// arguments as they came: splicer-bench reads their flags.
func benchCommand(sub, short string) *cobra.Command {
	return &cobra.Command{
		Use: sub, Short: short, DisableFlagParsing: true,
		Long: "Usage: splicer " + sub + " [options]\n\nRuns splicer-bench " + sub + " (installed beside splicer): " + short + ".\nIts options: splicer " + sub + " --help.\n",
		RunE: func(_ *cobra.Command, args []string) error { return benchBinary(sub, args) },
	}
}

// benchBinary replaces this process with splicer-bench SUB ARGS.
func benchBinary(sub string, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	path := filepath.Join(filepath.Dir(exe), "splicer-bench")
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("splicer-bench"); err != nil {
			return errors.New("splicer " + sub + " needs splicer-bench beside splicer or on PATH (make build builds both)")
		}
	}
	argv := append([]string{path, sub}, args...)
	return fmt.Errorf("exec %s: %w", path, syscall.Exec(path, argv, os.Environ()))
}

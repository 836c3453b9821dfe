// splicer demo and splicer bench: run the splicer-bench binary installed beside this one, which holds the lab, load generators and plots so the daemon does not link them.

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

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

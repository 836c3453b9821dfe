// Command bpf2go runs cilium/ebpf's bpf2go with the one compiler, target and set of C flags every BPF program of splicer is built with.
//
// A go:generate line passes what differs between programs (the -type
// names, the identifier and the source file):
//
//	//go:generate go run github.com/splicer/splicer/internal/bpf2go -type foo splice bpf/splice.c
//
// The programs include only the headers vendored in internal/bpfinclude,
// never the host's, so the objects do not depend on the build machine's
// kernel or libbpf headers.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cflags are the C flags of every program: optimised (the verifier needs
// it), warnings are errors, BPF ISA v3 (ALU32, 32-bit jumps: Linux 5.1+),
// and no system include directory, so only the vendored headers are used.
const cflags = "-O2 -g -Wall -Werror -mcpu=v3 -nostdinc"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bpf2go:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := moduleRoot(wd)
	if err != nil {
		return err
	}
	// A relative include path keeps the build directory out of the objects.
	inc, err := filepath.Rel(wd, filepath.Join(root, "internal", "bpfinclude"))
	if err != nil {
		return err
	}
	flags := strings.Join([]string{cflags, "-I" + inc}, " ")
	cmd := exec.Command("go", append([]string{"tool", "bpf2go", "-cc", "clang-19", "-target", "bpfel", "-cflags", flags}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// moduleRoot is the nearest directory at or above dir holding go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above " + dir)
		}
	}
}

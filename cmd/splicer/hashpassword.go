// splicer hash-password: hash a socks5 user's password for the configuration file.

package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/proxy/socks5/passwd"
)

func hashPasswordCmd(args []string) error {
	fs := flag.NewFlagSet("hash-password", flag.ContinueOnError)
	iterations := fs.Int("iterations", passwd.DefaultIterations, "PBKDF2-SHA256 iterations (each SOCKS5 login pays them)")
	fs.Usage = func() {
		fmt.Fprintf(cur.stderr, `Usage: splicer hash-password [-iterations N] < password

Reads a password (typed without echo on a terminal, else the first line of
standard input) and prints its salted PBKDF2-SHA256 hash for a socks5 user's
password_hash. The same password hashes differently every time.

`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errSilent
	}
	pw, err := readPassword(os.Stdin, cur.stderr)
	if err != nil {
		return err
	}
	h, err := passwd.New(pw, *iterations)
	if err != nil {
		return err
	}
	fmt.Fprintln(cur.stdout, h)
	return nil
}

// readPassword reads one line, with echo off when in is a terminal.
func readPassword(in *os.File, prompt io.Writer) (string, error) {
	fd := int(in.Fd())
	if old, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		quiet := *old
		quiet.Lflag &^= unix.ECHO
		fmt.Fprint(prompt, "Password: ")
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err == nil {
			defer func() {
				unix.IoctlSetTermios(fd, unix.TCSETS, old)
				fmt.Fprintln(prompt)
			}()
		}
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", fmt.Errorf("read password: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", errors.New("empty password")
	}
	return pw, nil
}

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
	scheme := fs.String("scheme", "bcrypt", "bcrypt, argon2id or "+passwd.Scheme)
	cost := fs.Int("cost", passwd.DefaultBcryptCost, fmt.Sprintf("bcrypt cost, %d to %d (each step doubles what a login pays)", passwd.MinBcryptCost, passwd.MaxBcryptCost))
	iterations := fs.Int("iterations", passwd.DefaultIterations, passwd.Scheme+" iterations")
	user := fs.String("user", "", "print user:hash, a line for a socks5 users_file")
	fs.Usage = func() {
		fmt.Fprintf(cur.stderr, `Usage: splicer hash-password [-scheme bcrypt|argon2id|%s] [-user NAME] < password

Reads a password (typed without echo on a terminal, else the first line of
standard input) and prints its salted hash for a socks5 user's
password_hash, or with -user a user:hash line for a users_file (the format
htpasswd -B writes). bcrypt reads at most 72 bytes of a password; argon2id
(m=%d KiB, t=%d, p=%d) takes longer ones. The same password hashes
differently every time.

`, passwd.Scheme, passwd.DefaultArgon2.Memory, passwd.DefaultArgon2.Time, passwd.DefaultArgon2.Threads)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errSilent
	}
	// A cost flag for another scheme would be silently ignored.
	var misplaced error
	fs.Visit(func(f *flag.Flag) {
		if (f.Name == "cost" && *scheme != "bcrypt") || (f.Name == "iterations" && *scheme != passwd.Scheme) {
			misplaced = fmt.Errorf("-%s does not apply to -scheme %s", f.Name, *scheme)
		}
	})
	if misplaced != nil {
		return misplaced
	}
	if strings.Contains(*user, ":") {
		return errors.New("-user: a name in a users_file cannot hold ':'")
	}
	pw, err := readPassword(os.Stdin, cur.stderr)
	if err != nil {
		return err
	}
	var h string
	switch *scheme {
	case "bcrypt":
		h, err = passwd.NewBcrypt(pw, *cost)
	case "argon2id":
		h, err = passwd.NewArgon2id(pw, passwd.DefaultArgon2)
	case passwd.Scheme:
		h, err = passwd.New(pw, *iterations)
	default:
		return fmt.Errorf("-scheme %q: want bcrypt, argon2id or %s", *scheme, passwd.Scheme)
	}
	if err != nil {
		return err
	}
	if *user != "" {
		h = *user + ":" + h
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

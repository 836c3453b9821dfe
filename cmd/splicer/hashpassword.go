// splicer hash-password: hash a socks5 user's password for the configuration file.

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/proxy/socks5/passwd"
)

// hashFlags are splicer hash-password's flags.
type hashFlags struct {
	scheme, user     string
	cost, iterations int
}

func hashPasswordCommand() *cobra.Command {
	var f hashFlags
	c := &cobra.Command{
		Use: "hash-password", Short: "hash a socks5 user's password (read from stdin)",
		Long: fmt.Sprintf(`Usage: splicer hash-password [-scheme bcrypt|argon2id|%s] [-user NAME] < password

Reads a password (typed without echo on a terminal, else the first line of
standard input) and prints its salted hash for a socks5 user's
password_hash, or with -user a user:hash line for a users_file (the format
htpasswd -B writes). bcrypt reads at most 72 bytes of a password; argon2id
(m=%d KiB, t=%d, p=%d) takes longer ones. The same password hashes
differently every time.
`, passwd.Scheme, passwd.DefaultArgon2.Memory, passwd.DefaultArgon2.Time, passwd.DefaultArgon2.Threads),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return printUsage(c)
			}
			// A cost flag for another scheme would be silently ignored.
			if c.Flags().Changed("cost") && f.scheme != "bcrypt" {
				return fmt.Errorf("-cost does not apply to -scheme %s", f.scheme)
			}
			if c.Flags().Changed("iterations") && f.scheme != passwd.Scheme {
				return fmt.Errorf("-iterations does not apply to -scheme %s", f.scheme)
			}
			return f.run()
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.scheme, "scheme", "bcrypt", "bcrypt, argon2id or "+passwd.Scheme)
	fs.IntVar(&f.cost, "cost", passwd.DefaultBcryptCost, fmt.Sprintf("bcrypt cost, %d to %d (each step doubles what a login pays)", passwd.MinBcryptCost, passwd.MaxBcryptCost))
	fs.IntVar(&f.iterations, "iterations", passwd.DefaultIterations, passwd.Scheme+" iterations")
	fs.StringVar(&f.user, "user", "", "print user:hash, a line for a socks5 users_file")
	return c
}

// run reads the password and prints its hash.
func (f *hashFlags) run() error {
	if strings.Contains(f.user, ":") {
		return errors.New("-user: a name in a users_file cannot hold ':'")
	}
	pw, err := readPassword(os.Stdin, cur.stderr)
	if err != nil {
		return err
	}
	var h string
	switch f.scheme {
	case "bcrypt":
		h, err = passwd.NewBcrypt(pw, f.cost)
	case "argon2id":
		h, err = passwd.NewArgon2id(pw, passwd.DefaultArgon2)
	case passwd.Scheme:
		h, err = passwd.New(pw, f.iterations)
	default:
		return fmt.Errorf("-scheme %q: want bcrypt, argon2id or %s", f.scheme, passwd.Scheme)
	}
	if err != nil {
		return err
	}
	if f.user != "" {
		h = f.user + ":" + h
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

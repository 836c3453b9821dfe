// splicer reload and splicer upgrade: ask a running daemon, by its pid file or its admin endpoint, to reload its configuration or replace its binary; and the admin flags and request the commands that talk to a daemon share.

package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/splicer/splicer/internal/supervisor"
)

// control is one daemon action: its signal and its admin endpoint.
type control struct {
	name    string
	short   string // one line, for completion
	signal  syscall.Signal
	path    string
	help    string
	pidHelp string // what --pid-file does
}

var (
	reloadCtl = control{"reload", "re-read a running daemon's configuration", syscall.SIGHUP, "/reload",
		"Re-read the configuration file of a running 'splicer run' and apply it;\na file with errors is refused and the running setup stays.",
		"It waits for the outcome and prints it; a refusal (with every error)\nexits 1. With --pid-file it sends SIGHUP and reads the daemon's answer\nfrom the file beside the pid file (FILE with .reload for .pid)."}
	upgradeCtl = control{"upgrade", "replace a running daemon's binary", syscall.SIGUSR2, "/upgrade",
		"Start the splicer binary now installed at the running daemon's path,\nhand it the listening sockets, and let the old process drain: no\nconnection attempt is refused.",
		"With --admin or --config it waits for the outcome and prints it; with\n--pid-file it sends SIGUSR2 and the daemon logs the outcome."}
)

// controlCommand reaches the daemon through its admin endpoint (named,
// or read from its configuration), which answers with the outcome, or
// else sends the signal to the pid in the pid file.
func controlCommand(ctl control) *cobra.Command {
	var adm adminFlags
	var pidFile string
	c := &cobra.Command{
		Use: ctl.name, Short: ctl.short,
		Long: fmt.Sprintf("Usage: splicer %s (--admin HOST:PORT | --config FILE | --pid-file FILE)\n\n%s\n\n%s\n", ctl.name, ctl.help, ctl.pidHelp),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return printUsage(c)
			}
			return controlRun(c, ctl, adm, pidFile)
		},
	}
	adm = newAdminFlags(c)
	c.Flags().StringVar(&pidFile, "pid-file", "", "the daemon's pid file (as given to 'splicer run --pid-file'): send a signal")
	return c
}

func controlRun(cmd *cobra.Command, c control, adm adminFlags, pidFile string) error {
	if pidFile != "" {
		pid, err := splicerPid(pidFile)
		if err != nil {
			return err
		}
		if c.signal == syscall.SIGHUP {
			return reloadByPid(pidFile, pid)
		}
		return sendSignal(pid, c.signal)
	}
	if err := adm.resolve(); errors.Is(err, errNoAdmin) {
		return fmt.Errorf("%w: use --pid-file", err)
	} else if err != nil {
		return err
	}
	if *adm.addr == "" {
		return printUsage(cmd)
	}
	body, err := adminRequest(http.MethodPost, *adm.addr, c.path, *adm.token, supervisor.UpgradeTimeout+10*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprint(cur.stdout, string(body))
	return nil
}

// splicerPid reads the pid file at path, and checks that the process it
// names runs splicer.
func splicerPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: no pid in it", path)
	}
	if err := isSplicer(pid); err != nil {
		return 0, fmt.Errorf("%s: %w: not signalling it (a stale pid file, its pid reused?)", path, err)
	}
	return pid, nil
}

func sendSignal(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
}

// reloadByPid sends SIGHUP to pid and prints its answer, read from the
// status file beside pidFile (supervisor.ReloadByPid); a refusal is the
// error.
func reloadByPid(pidFile string, pid int) error {
	answer, err := supervisor.ReloadByPid(pidFile, pid)
	if err != nil {
		return err
	}
	fmt.Fprintln(cur.stdout, answer)
	return nil
}

// isSplicer checks that process pid runs a splicer binary: one named as
// this one is, or starting with "splicer". It reads the process's
// executable, or its name (comm, which anyone may read) when the
// executable is another user's to see.
func isSplicer(pid int) error {
	name, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	truncated := false
	if err != nil {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		name = strings.TrimSpace(string(comm))
		truncated = len(name) == 15 // comm keeps the first 15 bytes
	}
	name = filepath.Base(strings.TrimSuffix(name, " (deleted)"))
	self, _ := os.Executable()
	self = filepath.Base(self)
	if strings.HasPrefix(name, "splicer") || name == self || (truncated && strings.HasPrefix(self, name)) {
		return nil
	}
	return fmt.Errorf("process %d runs %s, not splicer", pid, name)
}

// adminFlags name a running daemon's admin endpoint: --admin, or
// --config for the file's admin address, and the token.
type adminFlags struct{ addr, config, token *string }

func newAdminFlags(c *cobra.Command) adminFlags {
	fs := c.Flags()
	return adminFlags{
		addr:   fs.String("admin", "", "the daemon's admin address (host:port)"),
		config: fs.String("config", "", "the daemon's configuration file: its admin address is used"),
		// The default is read in resolve, not here: help must never print a secret.
		token: fs.String("token", "", "the admin_token, if the daemon has one (default $SPLICER_ADMIN_TOKEN; with --config, the file's)"),
	}
}

// resolve takes the admin address, and the token unless one was given,
// from the --config file, if one was named.
func (a adminFlags) resolve() error {
	if *a.token == "" {
		*a.token = getenv("SPLICER_ADMIN_TOKEN")
	}
	if *a.config == "" {
		return nil
	}
	cfg, err := supervisor.LoadConfig(cur.stderr, *a.config)
	if err != nil {
		return err
	}
	if cfg.Admin == "" {
		return fmt.Errorf("%s %w", *a.config, errNoAdmin)
	}
	*a.addr = cfg.Admin
	if *a.token == "" {
		*a.token = cfg.AdminToken
	}
	return nil
}

// errNoAdmin: the configuration sets no admin address.
var errNoAdmin = errors.New("has no admin address")

// adminRequest sends method path to the admin endpoint at addr (a bare
// ":port" on loopback), with the token if any, and returns the answer's
// body; an answer other than 200 is the error, its body the message.
func adminRequest(method, addr, path, token string, timeout time.Duration) ([]byte, error) {
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(strings.TrimSpace(string(body)))
	}
	return body, err
}

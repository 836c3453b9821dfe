// splicer reload and splicer upgrade: ask a running daemon, by its pid file or its admin endpoint, to reload its configuration or replace its binary; and the admin address the commands that talk to a daemon use.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// control is one daemon action: its signal and its admin endpoint.
type control struct {
	name   string
	signal syscall.Signal
	path   string
	help   string
}

var (
	reloadCtl = control{"reload", syscall.SIGHUP, "/reload",
		"Re-read the configuration file of a running 'splicer run' and apply it;\na file with errors is refused and the running setup stays."}
	upgradeCtl = control{"upgrade", syscall.SIGUSR2, "/upgrade",
		"Start the splicer binary now installed at the running daemon's path,\nhand it the listening sockets, and let the old process drain: no\nconnection attempt is refused."}
)

func reloadCmd(args []string) error  { return controlCmd(reloadCtl, args) }
func upgradeCmd(args []string) error { return controlCmd(upgradeCtl, args) }

// controlCmd reaches the daemon through its admin endpoint (named, or read
// from its configuration), which answers with the outcome, or else sends
// the signal to the pid in the pid file.
func controlCmd(c control, args []string) error {
	fs := flag.NewFlagSet(c.name, flag.ExitOnError)
	adminAddr := fs.String("admin", "", "the daemon's admin address (host:port)")
	cfgPath := fs.String("config", "", "the daemon's configuration file: its admin address is used")
	pidFile := fs.String("pid-file", "", "the daemon's pid file (as given to 'splicer run --pid-file'): send a signal")
	token := fs.String("token", os.Getenv("SPLICER_ADMIN_TOKEN"), "the admin_token, if the daemon has one (default $SPLICER_ADMIN_TOKEN; with --config, the file's)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: splicer %s (--admin HOST:PORT | --config FILE | --pid-file FILE)\n\n%s\n\n", c.name, c.help)
		fmt.Fprintf(os.Stderr, "With --admin or --config it waits for the outcome and prints it; with\n--pid-file it sends %s and the daemon logs the outcome.\n\nOptions:\n", unixSignalName(c.signal))
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		fs.Usage()
		return errSilent
	}
	switch {
	case *pidFile != "":
		return signalPid(*pidFile, c.signal)
	case *cfgPath != "":
		if err := adminFromConfig(*cfgPath, adminAddr, token); errors.Is(err, errNoAdmin) {
			return fmt.Errorf("%w: use --pid-file", err)
		} else if err != nil {
			return err
		}
	}
	if *adminAddr == "" {
		fs.Usage()
		return errSilent
	}
	return postControl(*adminAddr, c.path, *token)
}

func unixSignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGUSR2:
		return "SIGUSR2"
	}
	return s.String()
}

func signalPid(path string, sig syscall.Signal) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("%s: no pid in it", path)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
}

// errNoAdmin: the configuration sets no admin address.
var errNoAdmin = errors.New("has no admin address")

// adminFromConfig sets addr to the admin address of the configuration at
// path, and token to its admin_token unless one was given.
func adminFromConfig(path string, addr, token *string) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	if cfg.Admin == "" {
		return fmt.Errorf("%s %w", path, errNoAdmin)
	}
	*addr = cfg.Admin
	if *token == "" {
		*token = cfg.AdminToken
	}
	return nil
}

// adminHost is addr to dial: a bare ":port" on loopback.
func adminHost(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// postControl asks the admin endpoint and prints its answer.
func postControl(addr, path, token string) error {
	client := &http.Client{Timeout: upgradeTimeout + 10*time.Second}
	req, err := http.NewRequest(http.MethodPost, "http://"+adminHost(addr)+path, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(body)))
	}
	fmt.Print(string(body))
	return nil
}

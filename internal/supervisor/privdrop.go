// Least privilege: a daemon started as root with `user:` binds its sockets, then hands them to a copy of itself running as that user with only the capabilities its engines need (capabilities.go), and steps aside.

package supervisor

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/handoff"
)

// needsDrop reports whether this process should hand over to cfg.User.
func needsDrop(cfg *config.Config) bool {
	return cfg.User != "" && os.Geteuid() == 0
}

// lookupUser resolves a user name or uid to its uid and primary gid, to
// run with caps (neededCaps).
func lookupUser(name string, caps []uintptr) (*handoff.Identity, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q: uid %q gid %q", name, u.Uid, u.Gid)
	}
	return &handoff.Identity{UID: uint32(uid), GID: uint32(gid), Caps: caps}, nil
}

// dropPrivileges binds every listener and the admin endpoint as root,
// starts this binary as cfg.User on those sockets, and returns once it
// serves; the caller then exits.
func dropPrivileges(cfg *config.Config, pidFile string, log *slog.Logger) error {
	id, err := lookupUser(cfg.User, neededCaps(cfg))
	if err != nil {
		return err
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	bind := func(name, addr string) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listener %s: %w", name, err)
		}
		defer ln.Close()
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			return err
		}
		files[name] = f
		return nil
	}
	for _, l := range cfg.Listeners {
		if err := bind(l.Name, l.Listen); err != nil {
			return err
		}
	}
	if cfg.Admin != "" {
		if err := bind(adminSocket, cfg.Admin); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child, err := startBounded(id.Caps, func() (*handoff.Child, error) {
		return handoff.StartAs(exe, os.Args[1:], files, time.Minute, id)
	})
	if err != nil {
		return fmt.Errorf("start as user %s: %w", cfg.User, err)
	}
	pid := child.Process.Pid
	log.Info("sockets bound as root; running as "+cfg.User, "pid", pid, "uid", id.UID, "capabilities", capNames(id.Caps))
	announceSuccessor(log, pidFile, pid, id)
	return nil
}

// lockPrivileges makes sure a process running as cfg.User never gains
// privileges again (no_new_privs): no setuid binary, no file capabilities.
func lockPrivileges(cfg *config.Config, log *slog.Logger) {
	if cfg.User == "" || os.Geteuid() == 0 {
		return
	}
	// Every thread: a thread without it could exec a setuid binary.
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			log.Warn("no_new_privs", "err", err)
		}
	}
}

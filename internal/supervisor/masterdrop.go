// A master started as root with `user:` binds every socket, hands them to a copy of itself running as that user with only the engines' capabilities, and steps aside; the copy starts the workers as itself.

package supervisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/handoff"
	"github.com/splicer/splicer/internal/sockopt"
)

// spreadFile names listener name's program among what a root master
// hands to the master that runs as the user.
func spreadFile(name string) string { return "spread/" + name }

// workerSocket names worker i's socket called name among those a root
// master hands to the master that runs as the user.
func workerSocket(i int, name string) string { return strconv.Itoa(i) + "/" + name }

// handToUser starts this binary as cfg.User on every socket the master
// bound, and returns once it serves: the caller, root, then exits.
func (m *master) handToUser() error {
	id, err := lookupUser(m.cfg.User, m.caps)
	if err != nil {
		return err
	}
	// The user's master reaches its workers' admin sockets through the
	// directory: it must be theirs.
	for _, p := range append([]string{m.dir}, m.adminPaths()...) {
		if err := os.Chown(p, int(id.UID), int(id.GID)); err != nil {
			return err
		}
	}
	files := map[string]*os.File{}
	for i, fs := range m.files {
		for name, f := range fs {
			files[workerSocket(i, name)] = f
		}
	}
	for name, g := range m.spread {
		if f, err := g.File(); err == nil {
			defer f.Close()
			files[spreadFile(name)] = f
		}
	}
	if m.adminLn != nil {
		f, err := handoff.Dup(m.adminLn.(*net.TCPListener))
		if err != nil {
			return err
		}
		defer f.Close()
		files[adminSocket] = f
	}
	child, err := startBounded(id.Caps, func() (*handoff.Child, error) {
		return handoff.StartAs(m.exe, os.Args[1:], files, time.Minute, id)
	})
	if err != nil {
		return fmt.Errorf("start as user %s: %w", m.cfg.User, err)
	}
	pid := child.Process.Pid
	m.log.Info("sockets bound as root; the master runs as "+m.cfg.User, "pid", pid, "uid", id.UID, "workers", m.count)
	announceSuccessor(m.log, m.pidFile, pid, id)
	return nil
}

func (m *master) adminPaths() []string {
	out := make([]string, m.count)
	for i := range out {
		out[i] = m.adminPath(i)
	}
	return out
}

// takeSockets takes what a root master handed over: each worker's
// sockets, the directory of their admin sockets, and the admin
// endpoint's socket. Sockets from anything else (the single process of
// an upgrade) are refused: they are one set, not one per worker.
func (m *master) takeSockets(in *handoff.Inherited) error {
	m.files = make([]map[string]*os.File, m.count)
	for i := range m.files {
		m.files[i] = map[string]*os.File{}
		f := in.File(workerSocket(i, adminSocket))
		if f == nil {
			return errors.New("workers cannot be turned on by an upgrade: the process that runs now has one set of sockets to hand over; restart splicer")
		}
		m.files[i][adminSocket] = f
		for _, l := range m.cfg.Listeners {
			if f := in.File(workerSocket(i, l.Name)); f != nil {
				m.files[i][l.Name] = f
			}
		}
	}
	for _, l := range m.cfg.Listeners {
		if f := in.File(spreadFile(l.Name)); f != nil {
			m.takeSpread(l.Name, f)
		}
	}
	path, err := unixPath(m.files[0][adminSocket])
	if err != nil {
		return err
	}
	m.dir = filepath.Dir(path)
	m.adminLn, err = in.Listener(adminSocket, m.cfg.Admin)
	return err
}

// unixPath is where the unix socket f is bound.
func unixPath(f *os.File) (string, error) {
	var sa unix.Sockaddr
	err := sockopt.WithFD(f, func(fd int) (err error) {
		sa, err = unix.Getsockname(fd)
		return err
	})
	if err != nil {
		return "", err
	}
	u, ok := sa.(*unix.SockaddrUnix)
	if !ok || u.Name == "" {
		return "", fmt.Errorf("not a bound unix socket: %T", sa)
	}
	return u.Name, nil
}

// One host of the lab: a named network namespace and the ways to run code, sockets and commands inside it.

package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/splicer/splicer/internal/sockopt"
)

// netnsDir is where `ip netns` and vishvananda/netns keep named namespaces.
const netnsDir = "/run/netns"

// NS is one network namespace of a lab, named so that `ip netns exec` finds
// it.
type NS struct {
	// Name is the namespace's name under /run/netns.
	Name string

	lab *Lab
}

// createNS creates the named namespace. netns.NewNamed moves the calling
// thread into the new namespace, so the thread is locked around it and moved
// back.
func createNS(l *Lab, name string) (*NS, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	created, createErr := netns.NewNamed(name)
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in some other namespace: keep it locked so that
		// Go destroys it instead of running other goroutines on it.
		return nil, errors.Join(createErr, fmt.Errorf("return to original netns: %w", err))
	}
	runtime.UnlockOSThread()
	if createErr != nil {
		// NewNamed can leave an empty mount point file behind on failure.
		os.Remove(filepath.Join(netnsDir, name))
		return nil, fmt.Errorf("create netns %s: %w", name, createErr)
	}
	created.Close()
	return &NS{Name: name, lab: l}, nil
}

// Path is the namespace's file, usable with setns(2) or nsenter --net.
func (n *NS) Path() string { return filepath.Join(netnsDir, n.Name) }

// handle opens the namespace afresh, so that no long-lived descriptor keeps it
// alive after Close and no closed descriptor is ever reused by mistake.
func (n *NS) handle() (netns.NsHandle, error) {
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		return netns.None(), fmt.Errorf("open netns %s: %w", n.Name, err)
	}
	return h, nil
}

// Do runs fn on an OS thread switched into the namespace. Sockets that fn
// creates belong to the namespace for their whole life, wherever they are
// used afterwards. Goroutines that fn starts do not run in the namespace.
func (n *NS) Do(fn func() error) error {
	target, err := n.handle()
	if err != nil {
		return err
	}
	defer target.Close()

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: Go destroys it when this goroutine
			// exits rather than letting other goroutines run in the lab.
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Listen is net.Listen inside the namespace. Use a literal IP in addr: name
// lookups may run on other goroutines, outside the namespace.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside the namespace.
func (n *NS) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// Dial connects from inside the namespace. Use a literal IP in addr: with a
// host name the dialer may race connections on goroutines outside it. The
// socket options ctx carries (sockopt.WithMSS) are set before connect, as
// the forwarder's own dialer does.
func (n *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.Do(func() (err error) {
		conn, err = sockopt.Dialer().DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Dialer is Dial as a value, for code that takes a dial function.
func (n *NS) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return n.Dial
}

// Command prepares name to run inside the namespace through `ip netns exec`,
// which also gives it a /sys that shows the namespace's interfaces. The
// process gets its own process group, and the whole group is killed when ctx
// ends or the lab closes; it also dies if this process does. Close kills any
// process left in the namespace in any case, so the caller need not track it.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithCancel(ctx)
	// Ties the command to the lab; released when the lab closes.
	context.AfterFunc(n.lab.ctx, cancel)
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Grandchildren holding our pipes must not make Wait hang after a kill.
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// Sysctl sets a sysctl of the namespace's own network stack, for example
// ("net.ipv4.tcp_sack", "0"). Keys name files under /proc/sys with dots for
// slashes, so keys containing an interface name with a dot cannot be set.
func (n *NS) Sysctl(key, value string) error {
	if key == "" || strings.ContainsAny(key, "/ ") || strings.Contains(key, "..") {
		return fmt.Errorf("sysctl key %q is not of the form a.b.c", key)
	}
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	// /proc/sys/net resolves against the network namespace of the thread that
	// opens it, hence Do.
	return n.Do(func() error {
		if err := os.WriteFile(path, []byte(value), 0); err != nil {
			return fmt.Errorf("%s: sysctl %s=%s: %w", n.Name, key, value, err)
		}
		return nil
	})
}

// Netlink opens a netlink handle bound to the namespace, for callers that
// manage links, routes, qdiscs or tc filters there. The caller closes it; an
// open handle keeps the namespace alive.
func (n *NS) Netlink() (*netlink.Handle, error) {
	target, err := n.handle()
	if err != nil {
		return nil, err
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", n.Name, err)
	}
	return h, nil
}

// LinkIndex is the interface index of ifname inside the namespace, as BPF
// attach calls made inside Do expect it.
func (n *NS) LinkIndex(ifname string) (int, error) {
	h, err := n.Netlink()
	if err != nil {
		return 0, err
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("%s: find %s: %w", n.Name, ifname, err)
	}
	return link.Attrs().Index, nil
}

// removeNS kills the processes inside the named namespace and deletes its
// name. The kernel frees the namespace, and its interfaces, once the last
// socket or descriptor referring to it is gone.
func removeNS(name string) error {
	path := filepath.Join(netnsDir, name)
	if err := killProcessesIn(path); err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	// EINVAL from the unmount means the name was a bare file, as a failed
	// creation leaves behind; remove it too.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// killProcessesIn SIGKILLs every process whose network namespace is the one
// at nsPath, as `ip netns pids` would list them, and waits until they have
// left it. This process is spared even if one of its threads is in there.
func killProcessesIn(nsPath string) error {
	var target syscall.Stat_t
	if err := syscall.Stat(nsPath, &target); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", nsPath, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := pidsInNS(target)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survived SIGKILL", pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// A killed process leaves the namespace once it has exited; there is
		// no event to wait on for a process that is not our child.
		time.Sleep(10 * time.Millisecond)
	}
}

// pidsInNS lists the processes whose network namespace is ns.
func pidsInNS(ns syscall.Stat_t) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue // exited meanwhile, or a zombie, which holds no namespace
		}
		if st.Dev == ns.Dev && st.Ino == ns.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

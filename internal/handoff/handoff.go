// Package handoff hands a running splicer's listening sockets to the binary that replaces it (a hitless upgrade), and tells the old process when the new one serves.
//
// The old process starts the new binary with the sockets as extra file
// descriptors, named in the environment, plus the write end of a pipe. The
// new process builds its listeners on the inherited sockets (the same
// kernel sockets: connections waiting in their accept queues are not
// lost), starts serving and writes "ready" to the pipe. Only then does the
// old process stop accepting and drain its pairs; if the new one fails
// first, the old one keeps serving as if nothing happened. This is the
// pattern of cloudflare/tableflip and of HAProxy's and Envoy's hot restart,
// written out here because it is small and splicer also needs to pass the
// admin socket and the sockets of several listeners by name.
package handoff

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Env carries the manifest from the old process to the new one.
const Env = "SPLICER_HANDOFF"

// readyWord is what the new process writes to the pipe once it serves.
const readyWord = "ready"

// manifest names the inherited file descriptors.
type manifest struct {
	Sockets map[string]int `json:"sockets"` // name -> fd
	Ready   int            `json:"ready"`   // fd of the readiness pipe
}

// Child is a new process started by Start.
type Child struct {
	Process *os.Process
	exited  chan error
}

// Exited is closed with the process's end when it exits.
func (c *Child) Exited() <-chan error { return c.exited }

// Start runs path with args and the current environment, handing it files
// by name, and waits up to timeout for it to say it serves. On any failure
// the new process is killed and the caller keeps serving. files stay the
// caller's to close.
func Start(path string, args []string, files map[string]*os.File, timeout time.Duration) (*Child, error) {
	return StartAs(path, args, files, timeout, nil)
}

// Identity is who a new process runs as: a user and group, keeping only
// the listed capabilities (as ambient capabilities, which survive the
// change of user and the exec).
type Identity struct {
	UID, GID uint32
	Caps     []uintptr
}

// StartAs is Start with the new process running as id (nil: as this one)
// and with env ("KEY=value") added to this process's environment, a key
// given there replacing this process's value.
func StartAs(path string, args []string, files map[string]*os.File, timeout time.Duration, id *Identity, env ...string) (*Child, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	m := manifest{Sockets: map[string]int{}}
	for _, name := range sortedNames(files) {
		m.Sockets[name] = 3 + len(cmd.ExtraFiles)
		cmd.ExtraFiles = append(cmd.ExtraFiles, files[name])
	}
	m.Ready = 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, readyW)
	js, _ := json.Marshal(m)
	cmd.Env = append(append(withoutHandoff(os.Environ()), env...), Env+"="+string(js))
	if id != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential:  &syscall.Credential{Uid: id.UID, Gid: id.GID, Groups: []uint32{}},
			AmbientCaps: id.Caps,
		}
	}
	err = cmd.Start()
	readyW.Close() // the child holds its own copy
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	c := &Child{Process: cmd.Process, exited: make(chan error, 1)}
	go func() { c.exited <- cmd.Wait(); close(c.exited) }()
	if err := waitReady(readyR, c, timeout); err != nil {
		cmd.Process.Kill()
		return nil, err
	}
	return c, nil
}

// waitReady reads the readiness word from r, giving up when the child
// exits or closes the pipe without it, or after timeout.
func waitReady(r *os.File, c *Child, timeout time.Duration) error {
	got := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		if strings.TrimSpace(line) == readyWord {
			got <- nil
			return
		}
		if err == nil {
			err = fmt.Errorf("unexpected %q", line)
		}
		got <- fmt.Errorf("new process did not become ready: %w", err)
	}()
	r.SetReadDeadline(time.Now().Add(timeout))
	select {
	case err := <-got:
		return err
	case err := <-c.exited:
		return fmt.Errorf("new process exited before it was ready: %v", err)
	}
}

func sortedNames(files map[string]*os.File) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func withoutHandoff(environ []string) []string {
	out := environ[:0:0]
	for _, kv := range environ {
		if !strings.HasPrefix(kv, Env+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Inherited is what this process received from the one it replaces.
type Inherited struct {
	files map[string]*os.File
	ready *os.File
}

// FromEnv returns the sockets handed to this process, or nil when it was
// not started by Start. It clears the variable so that processes this one
// starts do not see it.
func FromEnv() (*Inherited, error) {
	js, ok := os.LookupEnv(Env)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(Env)
	return Parse(js)
}

// Parse decodes the manifest js, the value of Env, into the sockets
// it names.
func Parse(js string) (*Inherited, error) {
	var m manifest
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		return nil, fmt.Errorf("%s: %w", Env, err)
	}
	in := &Inherited{files: map[string]*os.File{}, ready: os.NewFile(uintptr(m.Ready), "handoff-ready")}
	for name, fd := range m.Sockets {
		in.files[name] = os.NewFile(uintptr(fd), name)
	}
	return in, nil
}

// Listener returns the inherited socket called name if it listens on
// addr, or nil (the caller binds a new one). A socket whose address no
// longer matches the configuration is closed.
func (in *Inherited) Listener(name, addr string) (net.Listener, error) {
	ln, err := in.Socket(name)
	if ln == nil || err != nil {
		return nil, err
	}
	if !sameAddr(ln.Addr(), addr) {
		ln.Close()
		return nil, nil
	}
	return ln, nil
}

// File takes the inherited file called name out of what Ready closes, as
// it came (nil if none): a master passes it on to a worker.
func (in *Inherited) File(name string) *os.File {
	if in == nil {
		return nil
	}
	f := in.files[name]
	delete(in.files, name)
	return f
}

// Socket returns the inherited listening socket called name, whatever it
// listens on (a unix socket, say), or nil.
func (in *Inherited) Socket(name string) (net.Listener, error) {
	if in == nil {
		return nil, nil
	}
	f := in.files[name]
	if f == nil {
		return nil, nil
	}
	delete(in.files, name)
	defer f.Close() // FileListener dups it
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("inherited socket %s: %w", name, err)
	}
	return ln, nil
}

// sameAddr reports whether bound is what a listener configured for want
// would bind: the same port (any, for port 0) and the same IP (any
// unspecified one for an empty or unspecified host).
func sameAddr(bound net.Addr, want string) bool {
	ta, ok := bound.(*net.TCPAddr)
	if !ok {
		return false
	}
	w, err := net.ResolveTCPAddr("tcp", want)
	if err != nil {
		return false
	}
	if w.Port != 0 && w.Port != ta.Port {
		return false
	}
	if w.IP == nil || w.IP.IsUnspecified() {
		return ta.IP.IsUnspecified()
	}
	return w.IP.Equal(ta.IP)
}

// Ready tells the old process that this one serves, and closes the
// inherited sockets nobody took.
func (in *Inherited) Ready() error {
	if in == nil {
		return nil
	}
	for name, f := range in.files {
		f.Close()
		delete(in.files, name)
	}
	_, err := in.ready.WriteString(readyWord + "\n")
	return errors.Join(err, in.ready.Close())
}

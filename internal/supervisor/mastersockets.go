// The master's socket service: a worker that a reload gives a new listener (or a listener a new address) asks the master for its socket of the group the master bound for it, as at the start.

package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/handoff"
)

// socketServiceName is the service's socket in the master's directory.
const socketServiceName = "master.sock"

// socketAskTimeout bounds one question to the service and its answer.
const socketAskTimeout = 5 * time.Second

// socketRequest is what a worker asks: its socket of the listener name,
// configured to listen on listen.
type socketRequest struct {
	Worker int    `json:"worker"`
	Name   string `json:"name"`
	Listen string `json:"listen"`
}

// offer is a listener's group of sockets that a reload bound, one per
// worker, offered while the workers reload.
type offer struct {
	listen string
	group
}

// serveSockets answers workers' requests for the sockets m.offers holds,
// until m.socketsLn closes. An old service's socket file (the master's
// binary before an upgrade's execve) is replaced.
func (m *master) serveSockets() error {
	path := filepath.Join(m.dir, socketServiceName)
	os.Remove(path)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("socket service: %w", err)
	}
	m.socketsLn = ln
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go m.answerSocket(c)
		}
	}()
	return nil
}

// answerSocket answers one request: "ok" with the socket, or an error.
func (m *master) answerSocket(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(socketAskTimeout))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	var req socketRequest
	var f *os.File
	if err = json.Unmarshal(buf[:n], &req); err == nil {
		f, err = m.offered(req)
	}
	if err != nil {
		m.log.Warn("socket service: no socket for a worker", "err", err)
		handoff.SendFile(c, "error: "+err.Error(), nil)
		return
	}
	if err := handoff.SendFile(c, "ok", f); err != nil {
		m.log.Warn("socket service: sending a worker its socket", "worker", req.Worker, "listener", req.Name, "err", err)
	}
}

// offered is worker req.Worker's socket of the group a reload bound for
// listener req.Name at req.Listen.
func (m *master) offered(req socketRequest) (*os.File, error) {
	m.offersMu.Lock()
	defer m.offersMu.Unlock()
	o, ok := m.offers[req.Name]
	if !ok || o.listen != req.Listen {
		return nil, fmt.Errorf("no socket bound for listener %q at %s", req.Name, req.Listen)
	}
	if req.Worker < 0 || req.Worker >= len(o.files) {
		return nil, fmt.Errorf("no worker %d", req.Worker)
	}
	return o.files[req.Worker], nil
}

// offer makes groups the service's to hand out; nil ends the offer.
func (m *master) offer(groups map[string]offer) {
	m.offersMu.Lock()
	m.offers = groups
	m.offersMu.Unlock()
}

// socketFromMaster asks the master's service (path) for worker w's
// socket of listener name at addr. A nil listener and nil error: the
// master has none (no service: an older master; or it says it bound
// none), and the worker binds its own. Any other failure is an error: a
// socket of its own beside a group the master bound would never be
// picked by its program, and the master's would have nobody accepting.
func socketFromMaster(path string, w worker, name, addr string, log *slog.Logger) (net.Listener, error) {
	if path == "" {
		return nil, nil
	}
	f, err := askMasterSocket(path, socketRequest{Worker: w.index, Name: name, Listen: addr})
	var none errNoSocket
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &none):
		log.Warn("the master has no socket for this listener: this worker binds its own, and new connections reach it by the kernel's hash", "listener", name, "err", err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listener %s: its socket from the master: %w", name, err)
	}
	defer f.Close() // FileListener dups it
	return net.FileListener(f)
}

// errNoSocket is the master's answer that it bound no socket for the
// listener asked for.
type errNoSocket string

func (e errNoSocket) Error() string { return string(e) }

// askMasterSocket sends req to the service at path and returns the
// socket it answers with.
func askMasterSocket(path string, req socketRequest) (*os.File, error) {
	c, err := net.DialTimeout("unixpacket", path, socketAskTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(socketAskTimeout))
	js, _ := json.Marshal(req)
	if _, err := uc.Write(js); err != nil {
		return nil, err
	}
	text, f, err := handoff.ReceiveFile(uc)
	if err != nil {
		return nil, err
	}
	if text != "ok" || f == nil {
		if f != nil {
			f.Close()
		}
		return nil, errNoSocket(text)
	}
	return f, nil
}

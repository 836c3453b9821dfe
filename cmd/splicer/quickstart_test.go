// examples/quickstart.yaml runs as an ordinary user (nobody, when the tests run as root) on loopback and forwards bytes.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splicer/splicer/origin"
	"github.com/splicer/splicer/origin/origintest"
)

func TestQuickstartAsOrdinaryUser(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The origin listens first, on a port the kernel picks, so no other
	// test can take it between a probe and the listen.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := ln.Addr().String()
	// The example's other ports, moved to free ones so tests run side by side.
	listen, admin := freeLoopback(t), freeLoopback(t)
	cfg := strings.NewReplacer("127.0.0.1:8000", listen, "127.0.0.1:8080", upstream, "127.0.0.1:9901", admin).Replace(string(data))
	dir := t.TempDir()
	// nobody must reach the file: t.TempDir makes private directories.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "quickstart.yaml")
	writeFile(t, path, []byte(cfg))

	origintest.Serve(t, ln, origin.Echo)

	bin := splicerBinary(t)
	cmd := exec.CommandContext(context.Background(), bin, "run", "--config", path)
	if os.Geteuid() == 0 {
		// As nobody: the binary's directory must be reachable.
		os.Chmod(filepath.Dir(bin), 0o755)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var logs []string
	deadline := time.After(15 * time.Second)
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("splicer exited:\n%s", strings.Join(logs, "\n"))
			}
			logs = append(logs, l)
			ready = strings.Contains(l, "admin listening")
		case <-deadline:
			t.Fatalf("splicer did not start:\n%s", strings.Join(logs, "\n"))
		}
	}
	go func() {
		for range lines {
		}
	}()

	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := strings.Repeat("quickstart ", 100000)
	go func() { io.WriteString(c, msg); c.(*net.TCPConn).CloseWrite() }()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("through the quickstart forwarder: %d of %d bytes, %v", len(got), len(msg), err)
	}
	if os.Geteuid() == 0 {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if !strings.Contains(string(status), "\nUid:\t65534\t") {
			t.Errorf("splicer did not run as nobody:\n%s", status)
		}
	}
}

// Notify delivers its datagram to $NOTIFY_SOCKET, and is silent without one.

package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
)

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if err := Notify("MAINPID=42\n" + Ready); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 128)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "MAINPID=42\nREADY=1" {
		t.Fatalf("systemd got %q, err %v", buf[:n], err)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify(Ready); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v, want nil", err)
	}
}

// Package sdnotify tells systemd about the service's state (sd_notify(3)) when it runs under a unit of Type=notify; elsewhere it does nothing.
//
// The protocol is one datagram of newline-separated assignments to the
// unix socket named in $NOTIFY_SOCKET; it is small enough that a library
// (go-systemd) would add a dependency for a dozen lines.
package sdnotify

import (
	"net"
	"os"
)

// States splicer sends.
const (
	Ready     = "READY=1"
	Reloading = "RELOADING=1"
	Stopping  = "STOPPING=1"
)

// Notify sends state to systemd. It returns nil when not run by systemd.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

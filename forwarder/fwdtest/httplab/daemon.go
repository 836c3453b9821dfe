// StartDaemon: a peer program (nginx, HAProxy) run in a lab namespace until the test ends, waited on until it accepts.

package httplab

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// StartDaemon runs name with args in ns (a foreground process) until the
// test ends and returns once addr, dialled from dialer, accepts. output,
// if not nil, is what the test logs of the program when it failed (its
// error log); otherwise its stdout and stderr are. Without the program
// installed the test is skipped, or fails where tools are required.
func StartDaemon(tb testing.TB, ns, dialer *lab.NS, addr string, output func() string, name string, args ...string) {
	tb.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testenv.SkipOrFail(tb, name+" is not installed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := ns.Command(ctx, name, args...)
	var out testenv.Buffer
	if output == nil {
		cmd.Stdout, cmd.Stderr = &out, &out
		output = out.String
	}
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("%s: %v", name, err)
	}
	// exited closes once the program has; waitErr is then its Wait's
	// error. A closed channel, unlike a sent value, is seen by both the
	// wait for it to accept and the cleanup.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		cancel()
		<-exited
		if tb.Failed() {
			tb.Logf("%s output:\n%s", name, output())
		}
	})
	testenv.Eventually(tb, name+" to accept on "+addr, func() bool {
		select {
		case <-exited:
			tb.Fatalf("%s exited: %v\n%s", name, waitErr, output())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := dialer.Dial(ctx, "tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

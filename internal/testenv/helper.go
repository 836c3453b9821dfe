// Helper processes: this test binary started again for one role (often in another network namespace), talking to the test line by line.

package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Helper is a running helper process. It writes its protocol lines to
// stdout prefixed with "> "; anything else it prints (the test
// framework's own output, a failure's message) is logged.
type Helper struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

// StartHelper starts cmd with env added to this process's environment and
// kills it at cleanup.
func StartHelper(tb testing.TB, cmd *exec.Cmd, env ...string) *Helper {
	tb.Helper()
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &Helper{in: in, out: bufio.NewScanner(out)}
}

// Line returns the helper's next protocol line, without its "> ".
func (h *Helper) Line(tb testing.TB) string {
	tb.Helper()
	for h.out.Scan() {
		if l, ok := strings.CutPrefix(h.out.Text(), "> "); ok {
			return strings.TrimSpace(l)
		}
		tb.Logf("helper: %s", h.out.Text())
	}
	tb.Fatalf("helper ended: %v", h.out.Err())
	return ""
}

// Send writes one line to the helper's stdin.
func (h *Helper) Send(tb testing.TB, line string) {
	tb.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		tb.Fatal(err)
	}
}

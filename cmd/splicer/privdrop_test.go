// Least privilege in the lab: `splicer run` started as root with `user: nobody` serves as uid 65534 without CAP_SYS_ADMIN, with no_new_privs, and still splices with engine ip.

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

func TestRunAsUserStillSplicesWithIP(t *testing.T) {
	testenv.RequireRoot(t)
	l := lab.NewT(t, lab.DefaultConfig())
	s := labSite(l)
	up := s.echoUpstream(t)
	addr := "10.99.1.1:17400"
	cfg := "user: nobody\n" + daemonYAML(s, "5s", listenerYAML("ip", addr, up, "ip"))
	// nobody must read the configuration and run the binary.
	os.Chmod(filepath.Dir(splicerBinary(t)), 0o755)
	d := s.startRunReadable(t, cfg)

	tr := s.startTransfer(t, addr, 64<<20)
	// The root process exits once the user's process serves: wait on
	// the admin endpoint, not on it.
	waitUntil(t, "the transfer spliced by ip", make(chan error), func() bool { return s.splicedBy("ip") })
	tr.wait(t, 60*time.Second)

	pid := d.pid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the serving process (pid %d): %v", pid, err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if uid := strings.Fields(fields["Uid"]); len(uid) < 2 || uid[1] != "65534" {
		t.Errorf("serving process Uid %q, want 65534 (nobody)", fields["Uid"])
	}
	eff, err := strconv.ParseUint(fields["CapEff"], 16, 64)
	if err != nil {
		t.Fatalf("CapEff %q: %v", fields["CapEff"], err)
	}
	if eff&(1<<21) != 0 {
		t.Errorf("CapEff %s has CAP_SYS_ADMIN", fields["CapEff"])
	}
	if eff&(1<<12) == 0 || eff&(1<<39) == 0 {
		t.Errorf("CapEff %s lacks CAP_NET_ADMIN or CAP_BPF, which engine ip needs", fields["CapEff"])
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs %q, want 1", fields["NoNewPrivs"])
	}
	// The root process stepped aside.
	select {
	case err := <-d.exited:
		if err != nil {
			t.Errorf("the root process: %v, want exit 0 after the handover", err)
		}
	default:
		t.Error("the root process is still running after handing over")
	}
}

// Package caps tells which Linux capabilities the process lacks, so engines can say what is missing before a load fails obscurely.
package caps

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability numbers from linux/capability.h.
const (
	NetAdmin = 12
	SysAdmin = 21
	BPF      = 39
)

// RequireBPF returns an error naming what the process lacks to load BPF
// programs and attach them to the network (CAP_BPF, or CAP_SYS_ADMIN which
// implies it, and CAP_NET_ADMIN), prefixed with who; nil when it has them or
// cannot tell.
func RequireBPF(who string) error {
	eff, err := effective()
	if err != nil {
		return nil // cannot tell: let the operation fail with its own error
	}
	var missing []string
	if eff&(1<<BPF) == 0 && eff&(1<<SysAdmin) == 0 {
		missing = append(missing, "CAP_BPF")
	}
	if eff&(1<<NetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s needs %s (run as root)", who, strings.Join(missing, " and "))
	}
	return nil
}

// effective reads the process's effective capability set.
func effective() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in /proc/self/status")
}

// A worker's share of the configuration: its own pin directory, its own part of the local port range, its share of the CPUs.

package supervisor

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/splicer/splicer/internal/config"
)

func TestWorkerShares(t *testing.T) {
	for _, tc := range []struct {
		w                 worker
		low, high         uint16
		wantPorts, wantPD string
	}{
		{worker{0, 2}, 40000, 59999, "40000-49999", "/sys/fs/bpf/splicer/x/worker-0"},
		{worker{1, 2}, 40000, 59999, "50000-59999", "/sys/fs/bpf/splicer/x/worker-1"},
		{worker{2, 3}, 40000, 40010, "40006-40010", "/sys/fs/bpf/splicer/x/worker-2"}, // the last takes the rest
	} {
		cfg := config.Default()
		cfg.Engines.IP.PinDir = "/sys/fs/bpf/splicer/x"
		cfg.Engines.IP.LocalPorts = fmt.Sprintf("%d-%d", tc.low, tc.high)
		tc.w.adjust(&cfg)
		if cfg.Engines.IP.LocalPorts != tc.wantPorts {
			t.Errorf("worker %v of %d-%d: ports %s, want %s", tc.w, tc.low, tc.high, cfg.Engines.IP.LocalPorts, tc.wantPorts)
		}
		if cfg.Engines.IP.PinDir != tc.wantPD {
			t.Errorf("worker %v: pin_dir %s, want %s", tc.w, cfg.Engines.IP.PinDir, tc.wantPD)
		}
		if want := max(1, runtime.NumCPU()/tc.w.count); cfg.Threads != want {
			t.Errorf("worker %v: threads %d, want %d", tc.w, cfg.Threads, want)
		}
	}

	cfg := config.Default()
	cfg.Engines.IP.PinDir, cfg.Engines.IP.LocalPorts, cfg.Threads = config.PinDirOff, config.LocalPortsOff, 3
	worker{1, 2}.adjust(&cfg)
	if cfg.Engines.IP.PinDir != config.PinDirOff || cfg.Engines.IP.LocalPorts != config.LocalPortsOff || cfg.Threads != 3 {
		t.Errorf("off and set values changed: pin_dir %s, local_ports %s, threads %d", cfg.Engines.IP.PinDir, cfg.Engines.IP.LocalPorts, cfg.Threads)
	}
}

func TestMergeUpstreams(t *testing.T) {
	w0 := `[{"listener":"l","pool":"p","server":"a:1","healthy":true,"failures":1,"active":2,"drained":true},
	        {"listener":"l","pool":"p","server":"b:1","healthy":true}]`
	w1 := `[{"listener":"l","pool":"p","server":"a:1","healthy":false,"failures":2,"active":3,"drained":true,"skipped":true},
	        {"listener":"l","pool":"p","server":"b:1","healthy":true,"drained":true}]`
	got := mergeUpstreams([][]byte{[]byte(w0), nil, []byte(w1)})
	if len(got) != 2 {
		t.Fatalf("%d servers, want 2: %+v", len(got), got)
	}
	a, b := got[0], got[1]
	if a.Server != "a:1" || a.Healthy || !a.Skipped || !a.Drained || a.Failures != 3 || a.Active != 5 {
		t.Errorf("a: %+v; want unhealthy (one worker says so), skipped, drained, 3 failures, 5 active", a)
	}
	if b.Server != "b:1" || !b.Healthy || b.Drained {
		t.Errorf("b: %+v; want healthy and not drained (one worker still picks it)", b)
	}
}

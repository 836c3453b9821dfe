// CPU accounting: a forwarder's own process time, and machine-wide busy time including softirq work done outside any process.

package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// clockTick is USER_HZ, the unit of /proc/*/stat and /proc/stat times.
const clockTick = 100

// CPUSample is a point-in-time reading of CPU time spent so far.
type CPUSample struct {
	Proc    time.Duration // forwarder processes (and their descendants), user+system
	Machine time.Duration // every CPU's non-idle time: user, system, irq, softirq, steal
	At      time.Time
}

// CPUUse is CPU time spent between two samples.
type CPUUse struct {
	Proc, Machine time.Duration
	Wall          time.Duration
}

// sampleCPU reads the CPU time of the process trees rooted at pids and of
// the whole machine.
func sampleCPU(pids []int) CPUSample {
	s := CPUSample{At: time.Now(), Machine: machineBusy()}
	for _, pid := range pids {
		s.Proc += treeCPU(pid)
	}
	return s
}

// Since returns the CPU spent from s to now.
func (s CPUSample) Since(pids []int) CPUUse {
	e := sampleCPU(pids)
	return CPUUse{Proc: e.Proc - s.Proc, Machine: e.Machine - s.Machine, Wall: e.At.Sub(s.At)}
}

// machineBusy sums the non-idle fields of the "cpu" line of /proc/stat.
// Softirq time is where kernel forwarding (route, and the deep engines)
// spends its effort, which no process is charged for.
func machineBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal
		var busy uint64
		for _, i := range []int{1, 2, 3, 6, 7, 8} {
			v, _ := strconv.ParseUint(fields[i], 10, 64)
			busy += v
		}
		return ticks(busy)
	}
	return 0
}

// treeCPU is the user+system time of pid and all its live descendants, plus
// the time of descendants already reaped (cutime, cstime).
func treeCPU(pid int) time.Duration {
	var total time.Duration
	for _, p := range append([]int{pid}, descendants(pid)...) {
		total += procCPU(p)
	}
	return total
}

func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which may hold spaces, in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0
	}
	var sum uint64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseUint(f[k], 10, 64)
		sum += v
	}
	return ticks(sum)
}

// descendants lists the live descendants of pid by their parent links.
func descendants(pid int) []int {
	parents := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if i < 0 || len(f) < 2 {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		ppid, _ := strconv.Atoi(f[1])
		parents[ppid] = append(parents[ppid], child)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range parents[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func ticks(n uint64) time.Duration {
	return time.Duration(n) * time.Second / clockTick
}

// cpus is the number of CPUs, for utilisation figures.
func cpus() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		return set.Count()
	}
	return 1
}

// threadTimes is a process tree's CPU time two ways: fine, the run time
// of its live threads from /proc/PID/task/TID/schedstat in nanoseconds;
// coarse, /proc/PID/stat's user+system in 10 ms ticks, which also counts
// threads that ended.
type threadTimes struct{ fine, coarse time.Duration }

// threadsCPU reads pid's tree's CPU time both ways.
func threadsCPU(pid int) threadTimes {
	t := threadTimes{coarse: treeCPU(pid)}
	for _, p := range append([]int{pid}, descendants(pid)...) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*/schedstat", p))
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			fields := strings.Fields(string(b))
			if len(fields) == 0 {
				continue
			}
			ns, _ := strconv.ParseInt(fields[0], 10, 64)
			t.fine += time.Duration(ns)
		}
	}
	return t
}

// since is the CPU time spent from t0 to t: the fine figure, unless the
// coarse one is more than two ticks above it, which means threads that
// ran in between have ended and taken their time out of the fine sum.
func (t threadTimes) since(t0 threadTimes) time.Duration {
	fine, coarse := t.fine-t0.fine, t.coarse-t0.coarse
	if coarse-fine > 2*ticks(1) {
		return coarse
	}
	return fine
}

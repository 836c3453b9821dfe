// Reserving a Range in a network namespace: net.ipv4.ip_local_reserved_ports, read, extended and restored as a set of ports.

package ports

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SysctlPath is the ports the kernel never picks for a connect or a bind
// to port 0 (Linux 2.6.35; per network namespace since 4.8). It covers
// IPv4 and IPv6 alike.
const SysctlPath = "/proc/sys/net/ipv4/ip_local_reserved_ports"

// Reservation is a Range excluded from the kernel's ephemeral ports in one
// network namespace.
type Reservation struct {
	r Range
	// added is what Reserve wrote, or found written by an earlier
	// process (state), and Release takes out again: the ports of r that
	// were not reserved otherwise.
	added Set
	state string
	do    func(func() error) error
	// holds are the ports outside r that pairs use with no socket to
	// keep them (Hold): hold.go.
	holds holds
}

// Reserve adds r to ip_local_reserved_ports of the network namespace in
// which do runs its function (/proc/sys/net resolves against the network
// namespace of the thread that opens it). A range reserved already (by an
// administrator's sysctl.conf, say) is not written: a process without the
// privilege to write the file can still use it. The error says what to
// do when the file cannot be written.
//
// state, if not empty, is where a process that leaves its range reserved
// for the pairs it hands over (an upgrade's old process: Handover)
// records the ports it added; the next process takes the record over and
// gives them back at its own end. (After a crash the range stays
// reserved and unrecorded: the next process uses it and leaves it.)
func Reserve(r Range, do func(func() error) error, state string) (*Reservation, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("local port range %v is empty", r)
	}
	res := &Reservation{r: r, do: do, state: state}
	var earlier Set
	if state != "" {
		if b, err := os.ReadFile(state); err == nil {
			earlier, _ = ParseSet(string(b))
			os.Remove(state) // this process owns them now
			os.Remove(filepath.Dir(state))
		}
	}
	err := do(func() error {
		unlock := lockSysctl()
		defer unlock()
		cur, err := readSysctl()
		if err != nil {
			return err
		}
		for p := int(r.Low); p <= int(r.High); p++ {
			if !cur.Has(uint16(p)) || earlier.Has(uint16(p)) {
				res.added.Add(uint16(p))
			}
		}
		res.holds.takeOver(&earlier, &cur, r)
		if res.added.Empty() {
			return nil
		}
		return addSysctl(&res.added)
	})
	if err != nil {
		return nil, fmt.Errorf("reserve local ports %v (net.ipv4.ip_local_reserved_ports): %w; reserve them beforehand, e.g. sysctl -w net.ipv4.ip_local_reserved_ports=%v", r, err, r)
	}
	return res, nil
}

// Range is the reserved range.
func (res *Reservation) Range() Range { return res.r }

// Release takes out of ip_local_reserved_ports what Reserve added, leaving
// whatever else was reserved before or since; and what a predecessor
// handed over after Reserve ran (the old process of an upgrade exits
// after the new one started splicing).
func (res *Reservation) Release() error {
	if res == nil {
		return nil
	}
	if res.state != "" {
		if b, err := os.ReadFile(res.state); err == nil {
			later, _ := ParseSet(string(b))
			res.added.Union(&later)
			os.Remove(res.state)
			os.Remove(filepath.Dir(res.state)) // if nothing else is in it
		}
	}
	res.holds.mu.Lock()
	res.added.Union(&res.holds.owned)
	res.holds.owned = Set{}
	res.holds.mu.Unlock()
	if res.added.Empty() {
		return nil
	}
	return res.do(func() error {
		unlock := lockSysctl()
		defer unlock()
		cur, err := readSysctl()
		if err != nil {
			return err
		}
		cur.Minus(&res.added)
		_, err = writeSysctl(&cur)
		return err
	})
}

// Handover leaves the range reserved, and the ports held outside it
// (Hold) too, and records what this process added in the state file, for
// the next process to take over: the pairs it adopts still use them.
func (res *Reservation) Handover() error {
	if res == nil || res.state == "" {
		return nil
	}
	res.holds.mu.Lock()
	rec := res.added
	rec.Union(&res.holds.owned)
	res.holds.mu.Unlock()
	if rec.Empty() {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(res.state), 0o755); err != nil {
		return err
	}
	return os.WriteFile(res.state, []byte(rec.String()+"\n"), 0o644)
}

// lockPath is a file the processes that edit the sysctl lock around each
// read and write, so that two workers of one master (each reserving its
// share of ports) do not overwrite each other's edit.
const lockPath = "/run/splicer/reserved-ports.lock"

// lockSysctl takes lockPath and returns its release. Where the file cannot
// be made or locked (no privilege to write /run), the edit goes on
// unlocked: a lone process needs no lock.
func lockSysctl() (unlock func()) {
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		return func() {}
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return func() {}
	}
	return func() { f.Close() } // closing releases the lock
}

// readSysctl reads the reserved ports. The kernel formats the whole list
// at the first read and returns what fits in the caller's buffer, then
// end of file: os.ReadFile's first 512 bytes would cut a long list. So
// the read takes a buffer larger than the list, trying again with a
// larger one if it came back full.
func readSysctl() (Set, error) {
	for size := 64 << 10; ; size *= 4 {
		b, err := readOnce(SysctlPath, size)
		if err != nil {
			return Set{}, err
		}
		if len(b) < size {
			return ParseSet(string(b))
		}
	}
}

// readOnce is what one read of up to size bytes returns from the file at
// path.
func readOnce(path string, size int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	n, err := f.Read(b)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return b[:n], nil
}

// maxWrite is the most of one write to the sysctl that the kernel parses
// at once: a longer write is taken a page at a time, the first page
// replacing the reserved ports and each next one adding to them, so that
// between the two the ports of the later pages are not reserved.
const maxWrite = 4095

// writeSysctl makes the reserved ports s, in one page: where s's list is
// longer (many scattered ports), the smallest gaps between its runs are
// reserved too until it fits (coarsen), and those ports are returned.
func writeSysctl(s *Set) (filled Set, err error) {
	v := s.String()
	if len(v) > maxWrite {
		c := coarsen(s, maxWrite)
		filled = c
		filled.Minus(s)
		v = c.String()
	}
	if v == "" {
		v = "\n" // the kernel takes an empty line as "none"
	}
	return filled, os.WriteFile(SysctlPath, []byte(v), 0)
}

// addSysctl adds s to the reserved ports, taking none out even for a
// moment: the kernel adds what a write past the file's start lists.
func addSysctl(s *Set) error {
	f, err := os.OpenFile(SysctlPath, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(1, 0); err != nil {
		return err
	}
	_, err = f.WriteString(s.String())
	return err
}

// coarsen returns s with every gap between its runs of at most g ports
// filled, for the smallest g that makes its list at most max bytes long.
func coarsen(s *Set, max int) Set {
	fill := func(g int) Set {
		c := *s
		last := -1
		s.each(func(p uint16) {
			if last >= 0 && int(p)-last-1 <= g {
				for q := last + 1; q < int(p); q++ {
					c.Add(uint16(q))
				}
			}
			last = int(p)
		})
		return c
	}
	lo, hi := 1, 65535 // a gap of hi fills everything: one run
	for lo < hi {
		g := (lo + hi) / 2
		if c := fill(g); len(c.String()) <= max {
			hi = g
		} else {
			lo = g + 1
		}
	}
	return fill(lo)
}

// Set is a set of ports, in the list format of the sysctl ("1,3-5").
type Set struct{ w [65536 / 64]uint64 }

// Add puts p in s.
func (s *Set) Add(p uint16) { s.w[p/64] |= 1 << (p % 64) }

// Has reports whether p is in s.
func (s *Set) Has(p uint16) bool { return s.w[p/64]&(1<<(p%64)) != 0 }

// Union adds every port of o to s.
func (s *Set) Union(o *Set) {
	for i := range s.w {
		s.w[i] |= o.w[i]
	}
}

// Minus takes every port of o out of s.
func (s *Set) Minus(o *Set) {
	for i := range s.w {
		s.w[i] &^= o.w[i]
	}
}

// Empty reports whether s holds no port.
func (s *Set) Empty() bool {
	for _, w := range s.w {
		if w != 0 {
			return false
		}
	}
	return true
}

// Len is the number of ports in s.
func (s *Set) Len() int {
	n := 0
	for _, w := range s.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// ParseSet reads the sysctl's format: comma-separated ports and ranges
// "a-b", blanks and a trailing newline allowed; empty is no port.
func ParseSet(v string) (Set, error) {
	var s Set
	v = strings.TrimSpace(v)
	if v == "" {
		return s, nil
	}
	for _, item := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return s, fmt.Errorf("port list %q: %w", v, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 16); err != nil {
				return s, fmt.Errorf("port list %q: %w", v, err)
			}
		}
		if b < a {
			return s, errors.New("port list " + strconv.Quote(v) + ": a range ends before it starts")
		}
		for p := a; p <= b; p++ {
			s.Add(uint16(p))
		}
	}
	return s, nil
}

// String is s in the sysctl's format, ranges compressed.
func (s *Set) String() string {
	var b strings.Builder
	for p := 0; p < 65536; p++ {
		if !s.Has(uint16(p)) {
			continue
		}
		q := p
		for q+1 < 65536 && s.Has(uint16(q+1)) {
			q++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
		if q > p {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(q))
		}
		p = q
	}
	return b.String()
}

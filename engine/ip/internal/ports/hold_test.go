// Tests of the ports held outside the range (Hold, Sync) in a throwaway network namespace of the lab.

package ports_test

import (
	"os"
	"strings"
	"testing"

	"github.com/splicer/splicer/engine/ip/internal/ports"
	"github.com/splicer/splicer/lab"
)

// reservedIn reads ip_local_reserved_ports in l's forwarder namespace, in
// one read large enough for any list.
func reservedIn(tb testing.TB, l *lab.Lab) (ports.Set, string) {
	tb.Helper()
	var v string
	if err := l.Fwd.Do(func() error {
		f, err := os.Open(ports.SysctlPath)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 1<<20)
		n, err := f.Read(b)
		v = strings.TrimSpace(string(b[:n]))
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	s, err := ports.ParseSet(v)
	if err != nil {
		tb.Fatal(err)
	}
	return s, v
}

// TestHoldReservesPorts: ports held outside the range are reserved at the
// next Sync (one write for all), a port held twice stays until both let
// go, a port someone else reserved is not taken (Held false) and left
// reserved, and nothing is written when nothing changed. 3,000 scattered
// ports (every other one, as the kernel's connects pick them) are all
// reserved and read back whole; as they are let go, the rewritten list
// stays in one write of the kernel's (at most 4095 bytes, the gaps of
// what is still held filled) and still has every held port; once none is
// held only the range and the other's port are left. An upgrade's next
// process takes a held port over and gives it back.
func TestHoldReservesPorts(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	if err := l.Fwd.Sysctl("net.ipv4.ip_local_reserved_ports", "33005"); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir() + "/run/reserved"
	res, err := ports.Reserve(ports.Range{Low: 45000, High: 45003}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	res.Hold(33001)
	res.Hold(33003)
	res.Hold(33003)
	res.Hold(33005)
	res.Hold(45001) // in the range: nothing to do
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, v := reservedIn(t, l); v != "33001,33003,33005,45000-45003" {
		t.Fatalf("reserved %q after holding 33001 and 33003", v)
	}
	for p, want := range map[uint16]bool{33001: true, 33003: true, 33005: false} {
		if res.Held(p) != want {
			t.Errorf("Held(%d) = %v, want %v", p, !want, want)
		}
	}
	if held, unreserved := res.HeldPorts(); held != 2 || unreserved != 1 {
		t.Errorf("HeldPorts %d, %d; want 2 held, 1 (33005, someone else's) not reserved", held, unreserved)
	}
	res.Unhold(33001)
	res.Unhold(33003)
	res.Unhold(33005)
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, v := reservedIn(t, l); v != "33003,33005,45000-45003" {
		t.Fatalf("reserved %q after letting go 33001 and one of 33003's holds", v)
	}
	// Nothing changed: no write, so an edit by someone else stays.
	if err := l.Fwd.Sysctl("net.ipv4.ip_local_reserved_ports", "33003,33005,45000-45003,50000"); err != nil {
		t.Fatal(err)
	}
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, v := reservedIn(t, l); v != "33003,33005,45000-45003,50000" {
		t.Fatalf("a Sync with nothing to do changed the list to %q", v)
	}

	var many []uint16
	for p := uint16(34001); len(many) < 3000; p += 2 {
		many = append(many, p)
		res.Hold(p)
	}
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	got, v := reservedIn(t, l)
	for _, p := range append(many, 33003, 33005, 45000, 45003, 50000) {
		if !got.Has(p) {
			t.Fatalf("port %d not reserved with 3,000 held (list of %d bytes)", p, len(v))
		}
	}
	for i, p := range many {
		if i%3 != 0 {
			res.Unhold(p)
		}
	}
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	got, v = reservedIn(t, l)
	if len(v) > 4095 {
		t.Errorf("the list after letting go two thirds is %d bytes: the kernel takes it in several writes", len(v))
	}
	for i, p := range many {
		if i%3 == 0 && !got.Has(p) {
			t.Fatalf("held port %d not reserved after letting go others", p)
		}
	}
	for i, p := range many {
		if i%3 == 0 {
			res.Unhold(p)
		}
	}
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, v := reservedIn(t, l); v != "33003,33005,45000-45003,50000" {
		t.Fatalf("reserved %q once the 3,000 are let go", v)
	}

	// An upgrade: the held port is handed over with the range, and the
	// next process gives it back.
	if err := res.Handover(); err != nil {
		t.Fatal(err)
	}
	next, err := ports.Reserve(ports.Range{Low: 45000, High: 45003}, l.Fwd.Do, state)
	if err != nil {
		t.Fatal(err)
	}
	next.Hold(33003) // an adopted pair
	if !next.Held(33003) {
		t.Error("the next process does not hold the port handed over")
	}
	next.Unhold(33003)
	if err := next.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := next.Release(); err != nil {
		t.Fatal(err)
	}
	if _, v := reservedIn(t, l); v != "33005,50000" {
		t.Fatalf("reserved %q after the next process released", v)
	}
}

// TestHoldLeavesEphemeralPorts: ports of the kernel's ephemeral range
// are reserved only while an eighth of its ports stays free: with 100
// ephemeral ports, 88 of 95 held are, 12 ports left.
func TestHoldLeavesEphemeralPorts(t *testing.T) {
	l := lab.NewT(t, lab.DefaultConfig())
	if err := l.Fwd.Sysctl("net.ipv4.ip_local_port_range", "33000 33099"); err != nil {
		t.Fatal(err)
	}
	res, err := ports.Reserve(ports.Range{Low: 45000, High: 45003}, l.Fwd.Do, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Release() })
	for p := uint16(33000); p < 33095; p++ {
		res.Hold(p)
	}
	if err := res.Sync(); err != nil {
		t.Fatal(err)
	}
	got, _ := reservedIn(t, l)
	n := 0
	for p := uint16(33000); p < 33100; p++ {
		if got.Has(p) {
			n++
		}
	}
	if held, unreserved := res.HeldPorts(); n != 88 || held != 88 || unreserved != 7 {
		t.Errorf("%d ephemeral ports reserved, HeldPorts %d, %d: want 88 reserved and held, 7 not", n, held, unreserved)
	}
}

// Tests of when an ended pair's port may serve a new connection to its server.

package ip

import (
	"testing"
	"time"

	"github.com/splicer/splicer/engine/ip/internal/datapath"
	"github.com/splicer/splicer/engine/ip/internal/ports"
)

// TestReusable: an ended pair's 4-tuple is taken again only once both
// directions were quiet a second, its upstream carried timestamps, the
// kernel's offset toward the server is known in milliseconds, and the
// new SYN's TSval (now in ms plus that offset) is newer than the last
// TSval the server saw from the pair (the client's, translated), across
// the 2^32 wrap too; a pair not yet quiet, or whose translated clock ran
// ahead, may be taken later; one without timestamps never.
func TestReusable(t *testing.T) {
	now := 1000 * time.Second
	nowMS := uint32(now / time.Millisecond)
	off := ports.Note{V: 0xfffff000} // next SYN: nowMS + off, wrapping
	next := nowMS + off.V
	spec := datapath.PairSpec{Up: datapath.DirSpec{TSOff: 12345}}
	ended := func(lastSeen time.Duration, serverSaw uint32) datapath.PairStats {
		return datapath.PairStats{
			Phase: datapath.PhaseTimeWait,
			Up:    datapath.DirStats{TSLast: serverSaw - spec.Up.TSOff, LastSeen: lastSeen},
			Down:  datapath.DirStats{TSLast: 7, LastSeen: lastSeen - time.Millisecond},
		}
	}
	for _, tc := range []struct {
		name     string
		spec     datapath.PairSpec
		st       datapath.PairStats
		off      ports.Note
		known    bool
		ok, wait bool
	}{
		{"quiet, clock behind the SYN's", spec, ended(now-2*time.Second, next-2000), off, true, true, false},
		{"quiet, one tick behind", spec, ended(now-time.Second, next-1), off, true, true, false},
		{"not quiet a second", spec, ended(now-999*time.Millisecond, next-2000), off, true, false, true},
		{"translated clock equal to the SYN's", spec, ended(now-5*time.Second, next), off, true, false, true},
		{"translated clock ahead", spec, ended(now-5*time.Second, next+100), off, true, false, true},
		{"offset unknown", spec, ended(now-5*time.Second, next-2000), off, false, false, false},
		{"microsecond timestamps", spec, ended(now-5*time.Second, next-2000), ports.Note{V: off.V, Flag: true}, true, false, false},
		{"no timestamps", spec, datapath.PairStats{Phase: datapath.PhaseTimeWait}, off, true, false, false},
		{"timestamps stripped toward the server", datapath.PairSpec{Up: datapath.DirSpec{StripTS: true}}, ended(now-5*time.Second, next-2000), off, true, false, false},
	} {
		ok, wait := reusable(tc.spec, tc.st, now, tc.off, tc.known)
		if ok != tc.ok || wait != tc.wait {
			t.Errorf("%s: reusable %v, later %v; want %v, %v", tc.name, ok, wait, tc.ok, tc.wait)
		}
	}
}

// TestEndedQueueKeepsOldestFirst: pairs taken from the front or from
// within, and those older than a cut, leave the rest oldest first, also
// once the queue has been compacted many times over.
func TestEndedQueueKeepsOldestFirst(t *testing.T) {
	var q endedQueue
	var want []time.Duration
	next := time.Duration(0)
	push := func(n int) {
		for range n {
			next++
			q.push(endedPair{at: next})
			want = append(want, next)
		}
	}
	check := func(step string) {
		t.Helper()
		if q.len() != len(want) {
			t.Fatalf("%s: %d pairs, want %d", step, q.len(), len(want))
		}
		for i, w := range want {
			if got := q.at(i).at; got != w {
				t.Fatalf("%s: pair %d noted at %v, want %v", step, i, got, w)
			}
		}
	}
	for round := range 50 {
		push(40)
		q.remove(0)
		want = want[1:]
		check("front taken")
		q.remove(3)
		want = append(want[:3:3], want[4:]...)
		check("fourth taken")
		cut := want[0] + time.Duration(round%7)
		q.dropOlder(cut)
		for len(want) > 0 && want[0] < cut {
			want = want[1:]
		}
		check("older dropped")
	}
	for q.len() > 0 {
		q.remove(0)
		want = want[1:]
	}
	check("emptied")
	if len(q.q) != 0 {
		t.Errorf("emptied queue keeps %d slots in use", len(q.q))
	}
}

// BenchmarkEndedQueueTakeOldest takes the oldest of a server's ended
// pairs and notes a new one, with as many queued as the default range
// has ports, as every pick does once the range is busy.
func BenchmarkEndedQueueTakeOldest(b *testing.B) {
	var q endedQueue
	for i := range 20000 {
		q.push(endedPair{at: time.Duration(i)})
	}
	for i := 0; b.Loop(); i++ {
		q.remove(0)
		q.push(endedPair{at: time.Duration(20000 + i)})
	}
}

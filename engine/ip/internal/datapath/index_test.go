// The pair index's chains: pairs whose keys hash alike are each found by either key, and unlinked from the head, the middle or the tail of a chain.

package datapath

import "testing"

// TestIndexChainsCollidingPairs: with every key hashed alike, five pairs
// share one chain per map; each is found by its A and its B key, and
// removing the middle, the head and the tail leaves the others found and
// the removed ones gone.
func TestIndexChainsCollidingPairs(t *testing.T) {
	x := newPairIndex()
	x.collide = true
	var pairs []*pair
	for i := range 5 {
		p := &pair{n: uint32(i)}
		p.ka.Sport, p.ka.Dport, p.ka.Family = uint16(1000+i), 80, 2
		p.kb.Sport, p.kb.Dport, p.kb.Family = uint16(2000+i), 8080, 2
		x.add(p)
		pairs = append(pairs, p)
	}
	check := func(gone map[*pair]bool) {
		t.Helper()
		for _, p := range pairs {
			wantA, wantB := p, p
			if gone[p] {
				wantA, wantB = nil, nil
			}
			if got := x.a(p.ka); got != wantA {
				t.Errorf("pair %d by its A key: %v, want %v", p.n, got, wantA)
			}
			if got := x.b(p.kb); got != wantB {
				t.Errorf("pair %d by its B key: %v, want %v", p.n, got, wantB)
			}
		}
		if n := len(x.all()); n != len(pairs)-len(gone) {
			t.Errorf("all: %d pairs, want %d", n, len(pairs)-len(gone))
		}
	}
	check(nil)
	gone := map[*pair]bool{}
	// add puts the newest at the head: pairs[4] heads, pairs[0] ends.
	for _, i := range []int{2, 4, 0} {
		x.remove(pairs[i])
		gone[pairs[i]] = true
		check(gone)
	}
}

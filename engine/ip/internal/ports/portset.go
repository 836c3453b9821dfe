// The ports of the range busy toward one server, as a set that knows when it is full and finds a free port without a walk of the range.

package ports

import "math/bits"

// portSet is a set of offsets into a range of size ports: a map while it
// holds few, a bitmap once it holds more than size/64. A server with a
// pair or two (a forward proxy's destinations) then costs a few bytes
// rather than a bitmap of the range (2,500 bytes for 20,000 ports), and a
// walk of the map meets at most size/64 busy ports before a free one,
// while the bitmap, where the map would cost more memory than it, is
// read a word of 64 ports at a time.
type portSet struct {
	n      int
	size   int
	sparse map[int]struct{} // nil once dense
	dense  []uint64         // bit i: offset i busy; bits past size set
}

func newPortSet(size int) *portSet {
	return &portSet{size: size, sparse: make(map[int]struct{})}
}

// add puts offset i in s.
func (s *portSet) add(i int) {
	if s.has(i) {
		return
	}
	s.n++
	if s.dense != nil {
		s.dense[i/64] |= 1 << (i % 64)
		return
	}
	s.sparse[i] = struct{}{}
	if s.n > s.size/64 {
		s.densify()
	}
}

// remove takes offset i out of s. A bitmap stays one: the set is dropped
// once empty (Allocator.unmarkUnlessHeld).
func (s *portSet) remove(i int) {
	if !s.has(i) {
		return
	}
	s.n--
	if s.dense != nil {
		s.dense[i/64] &^= 1 << (i % 64)
		return
	}
	delete(s.sparse, i)
}

func (s *portSet) has(i int) bool {
	if s.dense != nil {
		return s.dense[i/64]&(1<<(i%64)) != 0
	}
	_, ok := s.sparse[i]
	return ok
}

// densify turns the map into the bitmap. The bits past size are set, as
// busy ports that are never freed, so that a search never returns them.
func (s *portSet) densify() {
	s.dense = make([]uint64, (s.size+63)/64)
	for i := range s.sparse {
		s.dense[i/64] |= 1 << (i % 64)
	}
	if tail := s.size % 64; tail != 0 {
		s.dense[len(s.dense)-1] |= ^uint64(0) << tail
	}
	s.sparse = nil
}

// nextFree is the first offset at or after from, going round the range,
// that s does not hold; false when s holds every one, known at once. A
// nil s holds none. probes counts the map lookups or bitmap words read.
func (s *portSet) nextFree(from int, probes *int) (int, bool) {
	switch {
	case s == nil:
		return from, true
	case s.n >= s.size:
		return 0, false
	case s.dense == nil:
		// At most n busy ports come before a free one.
		for i := from; ; i = (i + 1) % s.size {
			*probes++
			if _, busy := s.sparse[i]; !busy {
				return i, true
			}
		}
	}
	// One word after another, from from's (its bits below from masked
	// off) round to from's again (all its bits): a free bit is in one.
	w := from / 64
	free := ^s.dense[w] &^ (1<<(from%64) - 1)
	for n := 1; n <= len(s.dense)+1; n++ {
		if free != 0 {
			*probes += n
			return w*64 + bits.TrailingZeros64(free), true
		}
		if w++; w == len(s.dense) {
			w = 0
		}
		free = ^s.dense[w]
	}
	return 0, false // not reached: n < size
}

// The pair index: the spliced pairs by the hash of their A and of their B flow key, colliding pairs chained, so a pair costs two small map slots and no copy of its tuples.

package datapath

import (
	"hash/maphash"
	"unsafe"
)

// pairIndex finds a pair by either of its flow keys. Each map holds, per
// hash, the first pair of a chain linked through pair.nextA or
// pair.nextB: a map keyed by the 40-byte keys (or 64-byte Tuples) would
// cost several times the pair's own record.
type pairIndex struct {
	seed maphash.Seed
	// collide hashes every key alike: tests set it to walk the chains.
	collide bool
	byA     map[uint64]*pair
	byB     map[uint64]*pair
	n       int
}

func newPairIndex() pairIndex {
	return pairIndex{seed: maphash.MakeSeed(), byA: map[uint64]*pair{}, byB: map[uint64]*pair{}}
}

func (x *pairIndex) hash(k spliceSpliceKey) uint64 {
	if x.collide {
		return 0
	}
	k.Pad = [3]uint8{}
	return maphash.Bytes(x.seed, unsafe.Slice((*byte)(unsafe.Pointer(&k)), unsafe.Sizeof(k)))
}

// a returns the pair whose A key is k, or nil.
func (x *pairIndex) a(k spliceSpliceKey) *pair {
	k.Pad = [3]uint8{} // as key() leaves it; an event's key may differ
	for p := x.byA[x.hash(k)]; p != nil; p = p.nextA {
		if p.ka == k {
			return p
		}
	}
	return nil
}

// b returns the pair whose B key is k, or nil.
func (x *pairIndex) b(k spliceSpliceKey) *pair {
	k.Pad = [3]uint8{}
	for p := x.byB[x.hash(k)]; p != nil; p = p.nextB {
		if p.kb == k {
			return p
		}
	}
	return nil
}

// add indexes p, whose keys the caller checked are in neither map.
func (x *pairIndex) add(p *pair) {
	ha, hb := x.hash(p.ka), x.hash(p.kb)
	p.nextA, x.byA[ha] = x.byA[ha], p
	p.nextB, x.byB[hb] = x.byB[hb], p
	x.n++
}

// remove unindexes p, which add indexed.
func (x *pairIndex) remove(p *pair) {
	unlink(x.byA, x.hash(p.ka), p, func(q *pair) **pair { return &q.nextA })
	unlink(x.byB, x.hash(p.kb), p, func(q *pair) **pair { return &q.nextB })
	p.nextA, p.nextB = nil, nil
	x.n--
}

// unlink takes p out of the chain of hash h, linked through next.
func unlink(m map[uint64]*pair, h uint64, p *pair, next func(*pair) **pair) {
	head := m[h]
	if head == p {
		if n := *next(p); n != nil {
			m[h] = n
		} else {
			delete(m, h)
		}
		return
	}
	for q := head; q != nil; q = *next(q) {
		if *next(q) == p {
			*next(q) = *next(p)
			return
		}
	}
}

// all returns every indexed pair.
func (x *pairIndex) all() []*pair {
	out := make([]*pair, 0, x.n)
	for _, p := range x.byA {
		for ; p != nil; p = p.nextA {
			out = append(out, p)
		}
	}
	return out
}

// pairOf returns the pair whose A tuple is a, or nil.
func (d *Datapath) pairOf(a Tuple) *pair {
	k, err := a.key()
	if err != nil {
		return nil
	}
	return d.index.a(k)
}
